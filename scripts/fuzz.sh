#!/usr/bin/env bash
# Runs the fuzz targets of fuzz/ (see fuzz/README.md) for <seconds> each, in one process each,
# <jobs> targets at a time (default 1: one after another; libFuzzer uses one core per process),
# then prints executions and findings per target.
#
#   scripts/fuzz.sh [--jobs <jobs>] <seconds> [target…]     (default: every target)
#
# Needs the nightly toolchain and cargo-fuzz (scripts/test.sh installs them). Inputs start from
# the committed seeds (fuzz/corpus/<target>/, never written) and the corpus grown by earlier
# runs (fuzz/target/corpus/<target>/, git-ignored). A crash, an input running longer than
# 10 s (a hang) or one using more than 2 GiB (out of memory) stops that target, leaves the
# input in fuzz/artifacts/<target>/ and makes the script exit 1 after the other targets ran.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

jobs=1
if [[ "${1:-}" == "--jobs" ]]; then
  if [[ ! "${2:-}" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: scripts/fuzz.sh [--jobs <jobs>] <seconds> [target…]" >&2
    exit 2
  fi
  jobs=$2
  shift 2
fi
if [[ $# -lt 1 || ! "$1" =~ ^[0-9]+$ ]]; then
  echo "usage: scripts/fuzz.sh [--jobs <jobs>] <seconds> [target…]" >&2
  exit 2
fi
seconds=$1
shift
export CARGO_INCREMENTAL=0
if [[ $# -gt 0 ]]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo +nightly fuzz list)
fi

# No sanitizer: the crates forbid unsafe code, so AddressSanitizer would check only the
# dependencies' unsafe code, at twice the build time and half the speed; debug assertions
# (overflow checks) stay on. 16 codegen units: faster builds for slightly slower runs.
build_flags=(--sanitizer none --codegen-units 16)
build_start=$SECONDS
cargo +nightly fuzz build "${build_flags[@]}"
echo "fuzz build: $((SECONDS - build_start)) s"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p target/fuzz-logs

# One target: its log in target/fuzz-logs/<target>.log, its verdict (ok / FAILED) in
# $scratch/<target>.status.
fuzz_one() {
  local target=$1
  mkdir -p "target/corpus/$target" "corpus/$target" "$scratch/$target"
  local log="target/fuzz-logs/$target.log"
  local status=ok
  # TMPDIR: targets that write files (log_dir) put them in a directory removed on exit.
  if ! TMPDIR="$scratch/$target" cargo +nightly fuzz run "${build_flags[@]}" "$target" \
    "target/corpus/$target" "corpus/$target" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
    -print_final_stats=1 >"$log" 2>&1; then
    status=FAILED
  fi
  echo "$status" >"$scratch/$target.status"
  rm -rf "${scratch:?}/$target"
}

running=0
for target in "${targets[@]}"; do
  if [[ $running -ge $jobs ]]; then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$target" &
  running=$((running + 1))
done
wait

failed=()
summary=()
for target in "${targets[@]}"; do
  log="target/fuzz-logs/$target.log"
  status=$(cat "$scratch/$target.status" 2>/dev/null || echo FAILED)
  if [[ "$status" != ok ]]; then
    failed+=("$target")
    tail -n 40 "$log" >&2
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  summary+=("$(printf '%-14s %12s executions  %s' "$target" "${runs:-?}" "$status")")
done

printf '%s\n' "fuzzing, ${seconds} s per target:" "${summary[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "findings in: ${failed[*]} (inputs in fuzz/artifacts/, logs in fuzz/target/fuzz-logs/)" >&2
  exit 1
fi
