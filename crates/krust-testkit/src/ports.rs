//! Free TCP ports on 127.0.0.1.
//!
//! A port is found by binding `127.0.0.1:0` and reading back what the kernel chose; the socket is
//! then closed and the number handed to the caller, who gives it to a process that binds it a
//! moment later. Within one test process a number is never handed out twice, so two nodes of one
//! test cannot collide; across processes the kernel's choice of an unused ephemeral port makes a
//! collision unlikely (a node that loses the race fails with "Address already in use" in its log).

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
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
    fn a_free_port_can_be_bound_and_is_seen_accepting() {
        let port = free_port().expect("port");
        assert!(!port_accepts(port), "nobody listens on a fresh port");
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).expect("bind the free port");
        assert!(wait_for_port(port, Duration::from_secs(5)));
        drop(listener);
    }
}
