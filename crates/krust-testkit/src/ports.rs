//! Free TCP ports on 127.0.0.1.
//!
//! A port is found by binding `127.0.0.1:0` and reading back what the kernel chose; the socket is
//! then closed and the number handed to the caller, who gives it to a process that binds it a
//! moment later. Within one test process a number is never handed out twice, so two nodes of one
//! test cannot collide; across processes the kernel's choice of an unused ephemeral port makes a
//! collision unlikely (a node that loses the race fails with "Address already in use" in its log).
//!
//! When test processes run side by side (`scripts/run-tests.py` runs test binaries in lanes),
//! each lane is given a range of its own in `KRUST_TEST_PORTS=<first>-<last>`, below the kernel's
//! ephemeral range: ports are then taken only from it, so no other lane — and no outgoing
//! connection, whose local port the kernel takes from the ephemeral range — can take a number
//! between the moment it is chosen and the moment a node binds it.

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::ops::RangeInclusive;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::error::{HarnessError, Result};

/// How many times the kernel may give back a number this process already handed out before we
/// give up (it cycles through ~28k ephemeral ports, so this is never reached in practice).
const MAX_BIND_ATTEMPTS: usize = 1_000;

fn handed_out() -> &'static Mutex<HashSet<u16>> {
    static HANDED_OUT: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    HANDED_OUT.get_or_init(|| Mutex::new(HashSet::new()))
}

/// The variable naming the range this process takes ports from.
pub const PORT_RANGE_VAR: &str = "KRUST_TEST_PORTS";

/// `KRUST_TEST_PORTS` parsed once: `None` when unset (the kernel chooses), the error text when it
/// is not `<first>-<last>` with `0 < first <= last`.
fn port_range() -> &'static std::result::Result<Option<RangeInclusive<u16>>, String> {
    static RANGE: OnceLock<std::result::Result<Option<RangeInclusive<u16>>, String>> =
        OnceLock::new();
    RANGE.get_or_init(|| match std::env::var(PORT_RANGE_VAR) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(e) => Err(format!("{PORT_RANGE_VAR}: {e}")),
        Ok(text) => parse_port_range(&text).map(Some).ok_or_else(|| {
            format!(
                "{PORT_RANGE_VAR}={text:?} is not <first>-<last> with 0 < first <= last <= 65535"
            )
        }),
    })
}

fn parse_port_range(text: &str) -> Option<RangeInclusive<u16>> {
    let (first, last) = text.trim().split_once('-')?;
    let first: u16 = first.trim().parse().ok()?;
    let last: u16 = last.trim().parse().ok()?;
    (first > 0 && first <= last).then_some(first..=last)
}

/// One free port on 127.0.0.1 that this process has not handed out before.
///
/// # Errors
/// `HarnessError::Io` if binding a loopback socket fails (no loopback interface, out of ports).
pub fn free_port() -> Result<u16> {
    free_ports(1)?.pop().ok_or_else(|| {
        HarnessError::io(
            "finding a free port on 127.0.0.1",
            std::io::Error::new(std::io::ErrorKind::AddrNotAvailable, "no port"),
        )
    })
}

/// `n` distinct free ports on 127.0.0.1, none handed out before by this process.
///
/// All `n` sockets are held open until every port is chosen, so the kernel cannot give the
/// same number twice within one call.
///
/// # Errors
/// `HarnessError::Io` if binding a loopback socket fails.
pub fn free_ports(n: usize) -> Result<Vec<u16>> {
    // A poisoned lock only means another test panicked while holding it; the set is still valid.
    let mut used = handed_out().lock().unwrap_or_else(|p| p.into_inner());
    match port_range() {
        Ok(None) => {}
        Ok(Some(range)) => return free_ports_in(range, n, &mut used),
        Err(message) => {
            return Err(HarnessError::io(
                format!("finding {n} free ports on 127.0.0.1: {message}"),
                std::io::Error::new(std::io::ErrorKind::InvalidInput, message.clone()),
            ));
        }
    }
    let mut listeners = Vec::with_capacity(n);
    let mut ports = Vec::with_capacity(n);
    let mut attempts = 0;
    while ports.len() < n {
        attempts += 1;
        if attempts > MAX_BIND_ATTEMPTS + n {
            return Err(HarnessError::io(
                format!("finding {n} free ports on 127.0.0.1"),
                std::io::Error::new(std::io::ErrorKind::AddrInUse, "no unused port left"),
            ));
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| HarnessError::io("binding 127.0.0.1:0", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| HarnessError::io("reading the address of a bound socket", e))?
            .port();
        if used.insert(port) {
            ports.push(port);
        }
        listeners.push(listener);
    }
    drop(listeners);
    Ok(ports)
}

/// `n` ports of `range` that bind on 127.0.0.1 and are not in `used`, scanning from a random
/// place so that successive test processes of one lane do not all start on the same numbers.
fn free_ports_in(
    range: &RangeInclusive<u16>,
    n: usize,
    used: &mut HashSet<u16>,
) -> Result<Vec<u16>> {
    let first = u32::from(*range.start());
    let size = u32::from(*range.end()) - first + 1;
    let start = rand::random::<u32>() % size;
    let mut listeners = Vec::with_capacity(n);
    let mut ports = Vec::with_capacity(n);
    for step in 0..size {
        if ports.len() == n {
            break;
        }
        let Ok(port) = u16::try_from(first + (start + step) % size) else {
            continue;
        };
        if used.contains(&port) {
            continue;
        }
        // A port something still listens on (or holds) fails to bind and is passed over.
        if let Ok(listener) = TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
            used.insert(port);
            ports.push(port);
            listeners.push(listener);
        }
    }
    drop(listeners);
    if ports.len() < n {
        return Err(HarnessError::io(
            format!(
                "finding {n} free ports on 127.0.0.1 in {range:?} ({PORT_RANGE_VAR}): no unused port left"
            ),
            std::io::Error::new(std::io::ErrorKind::AddrInUse, "no unused port left"),
        ));
    }
    Ok(ports)
}

/// Whether something accepts TCP connections on `127.0.0.1:port` right now.
pub fn port_accepts(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

/// Waits until `127.0.0.1:port` accepts a connection, polling every 50 ms up to `timeout`.
/// Returns whether it did.
pub fn wait_for_port(port: u16, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if port_accepts(port) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct_and_never_handed_out_twice() {
        let first = free_ports(8).expect("ports");
        let second = free_ports(8).expect("ports");
        let mut all: Vec<u16> = first.iter().chain(second.iter()).copied().collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 16, "ports repeated: {first:?} {second:?}");
    }

    #[test]
    fn a_port_range_is_read_as_first_dash_last() {
        assert_eq!(parse_port_range("20000-25999"), Some(20000..=25999));
        assert_eq!(parse_port_range(" 7 - 7 "), Some(7..=7));
        for bad in ["", "20000", "0-10", "10-9", "1-65536", "a-b", "-5"] {
            assert_eq!(parse_port_range(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn ports_from_a_range_stay_in_it_and_skip_what_is_taken() {
        let mut used = HashSet::new();
        let ports = free_ports_in(&(1..=65535), 4, &mut used).expect("ports");
        assert_eq!(ports.len(), 4);
        // A one-port range whose only port is bound here has nothing left to give.
        let held = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let port = held.local_addr().expect("addr").port();
        let e = free_ports_in(&(port..=port), 1, &mut HashSet::new()).expect_err("taken");
        assert!(e.to_string().contains("no unused port left"), "{e}");
        // Numbers already handed out are not handed out again.
        let again = free_ports_in(&(1..=65535), 4, &mut used).expect("ports");
        assert!(
            again.iter().all(|p| !ports.contains(p)),
            "{ports:?} {again:?}"
        );
    }

    #[test]
    fn a_free_port_can_be_bound_and_is_seen_accepting() {
        let port = free_port().expect("port");
        assert!(!port_accepts(port), "nobody listens on a fresh port");
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).expect("bind the free port");
        assert!(wait_for_port(port, Duration::from_secs(5)));
        drop(listener);
    }
}
