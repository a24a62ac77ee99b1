//! A minimal HTTP/1.1 server for Prometheus scrapes: `GET /metrics` answers the registry's
//! text exposition; any other path is `404`, any other method `405`, a malformed or oversized
//! request head `400`. One request per connection (`Connection: close`), which is all a
//! scraper needs and keeps every connection bounded:
//!
//! * the request head is read up to [`MAX_REQUEST_HEAD_BYTES`] within [`REQUEST_TIMEOUT`];
//! * at most [`MAX_CONNECTIONS`] connections are served at once (others wait in the backlog);
//! * the response is written within [`REQUEST_TIMEOUT`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::Registry;

/// Longest request head (request line and headers) read.
pub const MAX_REQUEST_HEAD_BYTES: usize = 8 * 1024;
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 16;
/// Time allowed to read a request and to write its response.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The path served.
pub const METRICS_PATH: &str = "/metrics";
/// Content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A running `/metrics` endpoint; dropping it stops accepting connections.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl MetricsServer {
    /// Binds `addr` (e.g. `127.0.0.1:9404`; port 0 picks one) and serves `registry`.
    ///
    /// # Errors
    /// The bind error.
    pub async fn bind(addr: &str, registry: Arc<Registry>) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        let task = tokio::spawn(async move {
            loop {
                let Ok(permit) = slots.clone().acquire_owned().await else {
                    return;
                };
                match listener.accept().await {
                    Ok((stream, peer)) => {
                        let registry = registry.clone();
                        tokio::spawn(async move {
                            if let Err(e) = serve_one(stream, &registry).await {
                                debug!(%peer, error = %e, "metrics connection failed");
                            }
                            drop(permit);
                        });
                    }
                    Err(e) => {
                        warn!(error = %e, "accepting a metrics connection");
                        // Out of file descriptors and the like: do not spin.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        });
        Ok(Self { addr, task })
    }

    /// The bound address.
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    NotFound,
    MethodNotAllowed,
    BadRequest,
}

/// Reads the request line of `head` (bytes up to the blank line).
fn route(head: &[u8]) -> Route {
    let Ok(text) = std::str::from_utf8(head) else {
        return Route::BadRequest;
    };
    let line = text.split("\r\n").next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::BadRequest;
    };
    if !version.starts_with("HTTP/1.") {
        return Route::BadRequest;
    }
    if method != "GET" {
        return Route::MethodNotAllowed;
    }
    // A query string (`?name[]=…`) is accepted and ignored.
    let path = target.split('?').next().unwrap_or_default();
    if path == METRICS_PATH {
        Route::Metrics
    } else {
        Route::NotFound
    }
}

/// Reads until the end of the request head, at most [`MAX_REQUEST_HEAD_BYTES`]. `None` if
/// the head does not end within the limit or the peer closes first.
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut buf = vec![0u8; MAX_REQUEST_HEAD_BYTES];
    let mut len = 0;
    loop {
        if len == buf.len() {
            return Ok(None);
        }
        let n = stream.read(&mut buf[len..]).await?;
        if n == 0 {
            return Ok(None);
        }
        len += n;
        if let Some(end) = buf[..len].windows(4).position(|w| w == b"\r\n\r\n") {
            buf.truncate(end);
            return Ok(Some(buf));
        }
    }
}

async fn serve_one(mut stream: TcpStream, registry: &Registry) -> std::io::Result<()> {
    let head = tokio::time::timeout(REQUEST_TIMEOUT, read_head(&mut stream))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "reading the request"))??;
    let route = head.as_deref().map_or(Route::BadRequest, route);
    let (status, extra, body) = match route {
        Route::Metrics => ("200 OK", "", registry.render(Instant::now()).into_bytes()),
        Route::NotFound => ("404 Not Found", "", b"Not Found\n".to_vec()),
        Route::MethodNotAllowed => (
            "405 Method Not Allowed",
            "Allow: GET\r\n",
            b"Method Not Allowed\n".to_vec(),
        ),
        Route::BadRequest => ("400 Bad Request", "", b"Bad Request\n".to_vec()),
    };
    let content_type = if route == Route::Metrics {
        CONTENT_TYPE
    } else {
        "text/plain; charset=utf-8"
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    response.extend_from_slice(&body);
    tokio::time::timeout(REQUEST_TIMEOUT, async {
        stream.write_all(&response).await?;
        stream.shutdown().await
    })
    .await
    .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "writing the response"))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Collector, Family};

    #[test]
    fn routes_by_request_line() {
        for (head, want, why) in [
            (
                &b"GET /metrics HTTP/1.1\r\nHost: x"[..],
                Route::Metrics,
                "scrape",
            ),
            (
                b"GET /metrics?x=1 HTTP/1.0",
                Route::Metrics,
                "query ignored",
            ),
            (b"GET / HTTP/1.1", Route::NotFound, "other path"),
            (b"POST /metrics HTTP/1.1", Route::MethodNotAllowed, "method"),
            (b"GET /metrics", Route::BadRequest, "no version"),
            (b"GET /metrics SPDY/3", Route::BadRequest, "not HTTP/1"),
            (b"\xff\xfe", Route::BadRequest, "not UTF-8"),
        ] {
            assert_eq!(route(head), want, "{why}");
        }
    }

    struct One;
    impl Collector for One {
        fn collect(&self, _now: Instant, out: &mut Vec<Family>) {
            out.push(Family::gauge("one".into(), "just one", 1.0));
        }
    }

    async fn get(addr: SocketAddr, request: &[u8]) -> String {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream.write_all(request).await.expect("write");
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer))
            .await
            .expect("answer in time")
            .expect("read");
        answer
    }

    #[tokio::test]
    async fn serves_metrics_and_refuses_the_rest() {
        let registry = Arc::new(Registry::new());
        registry.register(Arc::new(One));
        let server = MetricsServer::bind("127.0.0.1:0", registry)
            .await
            .expect("bind");
        let addr = server.local_addr();

        let ok = get(addr, b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains(CONTENT_TYPE), "{ok}");
        assert!(
            ok.ends_with("\r\n\r\n# HELP one just one\n# TYPE one gauge\none 1\n"),
            "{ok}"
        );

        let missing = get(addr, b"GET /other HTTP/1.1\r\n\r\n").await;
        assert!(missing.starts_with("HTTP/1.1 404 "), "{missing}");
        let post = get(addr, b"POST /metrics HTTP/1.1\r\n\r\n").await;
        assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
        assert!(post.contains("Allow: GET\r\n"), "{post}");

        // A head that never ends within the limit is refused, not buffered.
        let mut huge = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        huge.resize(MAX_REQUEST_HEAD_BYTES + 100, b'a');
        let refused = get(addr, &huge).await;
        assert!(refused.starts_with("HTTP/1.1 400 "), "{refused}");
    }
}
