#!/usr/bin/env python3
"""Runs every test of the workspace: each test binary (and the doc-tests) as one job, in lanes.

`cargo test` runs test binaries one after another. Most of krust's integration tests spend their
time waiting — for a JVM to start, a session to expire, a controller to fence a broker — so one
binary at a time leaves the machine half idle. This runner builds every test binary with
`cargo test --no-run`, then runs them `--lanes` at a time (default 2), longest first (figures
below, from a CI run), each binary exactly as `cargo test` would: in its package's directory,
with `CARGO_MANIFEST_DIR` and `CARGO_PKG_NAME` set. Each lane takes test ports from a range of
its own (`KRUST_TEST_PORTS`, read by krust-testkit's `free_ports`), below the kernel's ephemeral
range, so two lanes never race for one port.

A binary's output is printed whole when it ends, with its time; the run fails if any binary
fails, and ends with the times and the failures. Every binary has a time limit (`--timeout`);
one that overruns is killed with its process group and counts as failed.

    scripts/run-tests.py [--lanes N] [--timeout SECONDS] [-- <args for every test binary>]
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Seconds each binary of 20 s or more took in a two-lane run on 2 cores (with other builds
# running, so all of them slow). Only the order of the queue depends on them: the longest start first so that the lanes end together. A binary not
# listed counts as DEFAULT_SECONDS.
KNOWN_SECONDS = {
    "krust/zk_migration_acceptance": 382,
    "krust/quotas_vs_kafka": 318,
    "krust/clients_librdkafka": 312,
    "krust/zk_migration": 237,
    "krust/zk_migration_faults": 164,
    "krust/zk_migration_vs_kafka": 153,
    "krust/security_acls": 128,
    "krust/zk_broker_takeover": 123,
    "krust-raft/lib:krust_raft": 111,
    "krust/kafka_interop": 109,
    "krust/streams_eos": 101,
    "krust-testkit/log_interop": 95,
    "krust-testkit/kafka_harness": 91,
    "krust/txn_copier": 87,
    "krust/broker_combined_cluster": 86,
    "krust/broker_mixed_cluster": 86,
    "krust/security_inter_broker": 79,
    "krust/controller_reverse_interop": 75,
    "krust/tools_vs_kafka": 73,
    "krust/security_tls": 72,
    "krust/clients_kafka_cli": 71,
    "krust/controller_admin_vs_kafka": 71,
    "krust/security_sasl": 71,
    "krust/broker_cluster": 66,
    "krust/controller_kafka_brokers_data": 65,
    "krust/broker_no_loss": 64,
    "krust/clients_groups": 61,
    "krust/controller_kafka_brokers": 56,
    "krust/dev_cli": 47,
    "krust/txn_coordinator_mixed": 47,
    "krust/compression_vs_kafka": 39,
    "krust/config_startup_vs_kafka": 37,
    "krust-metadata/image_kafka_golden": 36,
    "krust/security_forwarded_acls": 35,
    "krust-testkit/zk_migration": 34,
    "krust/quorum_chaos": 34,
    "krust/controller_describe_configs_vs_kafka": 31,
    "krust/metadata_propagation_vs_kafka": 28,
    "krust/txn_eos": 28,
    "krust/groups_failover": 26,
    "krust/broker_kafka_controller": 25,
    "krust/quorum_interop": 25,
    "krust-zk/client_real_zk": 24,
    "krust/txn_kafka_python": 24,
    "krust-broker/server_real_clients": 23,
    "krust-log/crash_recovery": 23,
    "krust/clients_python": 23,
    "krust/broker_controller_failover": 22,
    "krust/configs_vs_kafka": 22,
}
DEFAULT_SECONDS = 20
# Lane i takes ports FIRST_PORT + i * PORTS_PER_LANE .. + PORTS_PER_LANE - 1: all of them below
# 32768, where Linux's ephemeral range starts, and above the fixed numbers tests write into
# configuration files they never start (19092-19096).
FIRST_PORT = 20000
PORTS_PER_LANE = 3000
MAX_LANES = 4


def build_test_binaries():
    """Builds every test binary of the workspace; returns (label, executable, package dir)."""
    command = [
        "cargo",
        "test",
        "--workspace",
        "--no-run",
        "--message-format=json-render-diagnostics",
    ]
    proc = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"run-tests: `{' '.join(command)}` failed (exit {proc.returncode})")
    binaries = []
    for line in proc.stdout.splitlines():
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            continue
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        if not message.get("profile", {}).get("test"):
            continue
        target = message["target"]
        package_dir = os.path.dirname(message["manifest_path"])
        package = os.path.basename(package_dir)
        kinds = target.get("kind", [])
        suffix = target["name"] if "test" in kinds else f"{'+'.join(kinds)}:{target['name']}"
        binaries.append((f"{package}/{suffix}", message["executable"], package_dir, package))
    return binaries


class Job:
    def __init__(self, label, command, cwd, env):
        self.label = label
        self.command = command
        self.cwd = cwd
        self.env = env
        self.seconds = KNOWN_SECONDS.get(label, DEFAULT_SECONDS)


class Runner:
    def __init__(self, jobs, lanes, timeout):
        # Longest first, then by name so that runs are repeatable.
        self.queue = sorted(jobs, key=lambda j: (-j.seconds, j.label))
        self.lanes = lanes
        self.timeout = timeout
        self.lock = threading.Lock()
        self.results = []
        self.running = {}
        self.stopping = False

    def next_job(self):
        with self.lock:
            if self.stopping or not self.queue:
                return None
            return self.queue.pop(0)

    def lane(self, index):
        first = FIRST_PORT + index * PORTS_PER_LANE
        ports = f"{first}-{first + PORTS_PER_LANE - 1}"
        while (job := self.next_job()) is not None:
            self.run(job, index, ports)

    def run(self, job, lane, ports):
        env = dict(job.env, KRUST_TEST_PORTS=ports)
        started = time.monotonic()
        with tempfile.TemporaryFile(mode="w+", errors="replace") as out:
            proc = subprocess.Popen(
                job.command,
                cwd=job.cwd,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            with self.lock:
                self.running[proc.pid] = proc
            timed_out = False
            try:
                code = proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                kill_group(proc)
                code = proc.wait()
            with self.lock:
                self.running.pop(proc.pid, None)
            elapsed = time.monotonic() - started
            out.seek(0)
            output = out.read()
        ok = code == 0 and not timed_out
        verdict = "ok" if ok else ("TIMED OUT" if timed_out else f"FAILED (exit {code})")
        with self.lock:
            self.results.append((job.label, elapsed, ok))
            print(f"     Running {job.label} [lane {lane}] ({' '.join(job.command)})", flush=True)
            sys.stdout.write(output)
            print(f"run-tests: {job.label}: {verdict} in {elapsed:.0f} s", flush=True)

    def stop(self):
        with self.lock:
            self.stopping = True
            procs = list(self.running.values())
        for proc in procs:
            kill_group(proc)


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=int(os.environ.get("KRUST_TEST_LANES", "2")))
    parser.add_argument("--timeout", type=float, default=2400.0, help="seconds per test binary")
    parser.add_argument("test_args", nargs="*", help="arguments for every test binary (after --)")
    args = parser.parse_args()
    if not 1 <= args.lanes <= MAX_LANES:
        sys.exit(f"run-tests: --lanes must be between 1 and {MAX_LANES}, not {args.lanes}")

    started = time.monotonic()
    jobs = []
    for label, executable, package_dir, package in build_test_binaries():
        env = dict(os.environ, CARGO_MANIFEST_DIR=package_dir, CARGO_PKG_NAME=package)
        jobs.append(Job(label, [executable, *args.test_args], package_dir, env))
    jobs.append(
        Job("doc-tests", ["cargo", "test", "--workspace", "--doc", "--no-fail-fast"], ROOT, dict(os.environ))
    )
    built = time.monotonic()
    print(f"run-tests: {len(jobs)} jobs in {args.lanes} lanes (build {built - started:.0f} s)", flush=True)

    runner = Runner(jobs, args.lanes, args.timeout)

    def on_signal(signum, _frame):
        runner.stop()
        sys.exit(128 + signum)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    threads = [threading.Thread(target=runner.lane, args=(i,), daemon=True) for i in range(args.lanes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    failed = [label for label, _, ok in runner.results if not ok]
    print(f"\nrun-tests: {len(runner.results)} jobs in {time.monotonic() - built:.0f} s, the longest:")
    for label, elapsed, ok in sorted(runner.results, key=lambda r: -r[1])[:15]:
        print(f"  {elapsed:6.0f} s  {label}{'' if ok else '  FAILED'}")
    if failed:
        print(f"run-tests: {len(failed)} failed: {', '.join(failed)}")
        sys.exit(1)
    print("run-tests: all passed")


if __name__ == "__main__":
    main()
