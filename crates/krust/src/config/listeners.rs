//! `listeners` / `advertised.listeners` entries: `NAME://host:port` (Kafka's
//! `CoreUtils.listenerListToEndPoints`; an empty host means "all interfaces", IPv6 hosts are
//! bracketed).

/// One listener endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Listener name, upper-cased as Kafka normalises it.
    pub listener_name: String,
    /// Host; `None` when empty (bind to all interfaces).
    pub host: Option<String>,
    /// Port.
    pub port: u16,
}

/// Parses a comma-separated listener list. Empty entries are skipped.
///
/// # Errors
/// Kafka's message for a malformed entry.
pub fn parse_listeners(value: &str) -> Result<Vec<Endpoint>, String> {
    let mut out: Vec<Endpoint> = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let endpoint = parse_endpoint(entry)?;
        if out
            .iter()
            .any(|e| e.listener_name == endpoint.listener_name)
        {
            return Err(format!(
                "Each listener must have a different name, listeners: {value}"
            ));
        }
        out.push(endpoint);
    }
    Ok(out)
}

fn parse_endpoint(entry: &str) -> Result<Endpoint, String> {
    let malformed = || format!("Unable to parse {entry} to a broker endpoint");
    let (name, rest) = entry.split_once("://").ok_or_else(malformed)?;
    let (host, port) = if let Some(bracketed) = rest.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']').ok_or_else(malformed)?;
        (host, after.strip_prefix(':').ok_or_else(malformed)?)
    } else {
        rest.rsplit_once(':').ok_or_else(malformed)?
    };
    let port: u16 = port.parse().map_err(|_| malformed())?;
    if name.is_empty() {
        return Err(malformed());
    }
    Ok(Endpoint {
        listener_name: name.to_uppercase(),
        host: (!host.is_empty()).then(|| host.to_owned()),
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kafka_listener_forms() {
        let endpoints =
            parse_listeners("PLAINTEXT://:9092, controller://127.0.0.1:9093,SSL://[::1]:9094")
                .expect("valid");
        assert_eq!(endpoints[0].host, None);
        assert_eq!(endpoints[1].listener_name, "CONTROLLER");
        assert_eq!(endpoints[1].host.as_deref(), Some("127.0.0.1"));
        assert_eq!(endpoints[2].host.as_deref(), Some("::1"));
        assert_eq!(endpoints[2].port, 9094);
    }

    #[test]
    fn rejects_malformed_entries() {
        for bad in [
            "PLAINTEXT:9092",
            "X://host",
            "X://host:port",
            "://h:1",
            "A://h:1,A://h:2",
        ] {
            assert!(parse_listeners(bad).is_err(), "{bad}");
        }
    }
}
