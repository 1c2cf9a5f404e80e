//! `ProxyError`: what went wrong, where, and whether a retry is safe; `rescue()` is the one place
//! an error becomes a response.

use std::io;

use http::{header::HeaderValue, Response, StatusCode};

use crate::{
    addr::EndpointAddr,
    http::body::ProxyBody,
    resilience::{limit::Shed, rate_limit::RetryAfter, timeout::TimeoutKind},
};

/// Header naming the cause of a response the proxy produced itself.
pub const ERROR_HEADER: &str = "weir-proxy-error";

/// Everything that can end a request inside the proxy.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The request is malformed or its framing is ambiguous; never forwarded.
    #[error("malformed request: {0}")]
    BadRequest(&'static str),
    /// A request body the proxy reads whole before forwarding sent nothing for the header-read
    /// timeout (nginx's `client_body_timeout`); never forwarded.
    #[error("the request body stalled")]
    BodyTimeout,
    /// A CONNECT on the gateway, which tunnels for no one (405, and the connection closes:
    /// bytes the client sent after it would be read as a request).
    #[error("CONNECT is not served on the gateway")]
    ConnectRefused,
    /// No gateway route matches the request.
    #[error("no route matches the request")]
    NoRoute,
    /// A route whose backends all have weight zero (Gateway API answers 500).
    #[error("route has no backend with a positive weight")]
    NoBackend,
    /// A backendRef names a service the registry does not hold.
    #[error("unknown service {0}")]
    UnknownService(String),
    /// The service has no ready endpoint.
    #[error("no ready endpoint for service {0}")]
    NoEndpoints(String),
    /// Every endpoint of the service stayed ejected by its breaker for the failfast wait.
    #[error("every endpoint of service {0} is ejected")]
    NoReadyEndpoints(String),
    /// A route or service rate limit is spent; come back after the wait.
    #[error("rate limit exceeded")]
    RateLimited(RetryAfter),
    /// The route's circuit breaker is open.
    #[error("the route's circuit breaker is open")]
    RouteCircuitOpen,
    /// The service's concurrency limit shed the request.
    #[error("{0}")]
    Shed(Shed),
    /// The connection to the proxy's own listener was refused (would loop).
    #[error("destination is this proxy's own listener")]
    Loop,
    /// TCP connect failed or timed out; nothing was sent, so a retry is safe.
    #[error("connect to {addr} failed: {source}")]
    Connect {
        /// The endpoint dialled.
        addr: EndpointAddr,
        /// The OS error.
        source: io::Error,
    },
    /// The upstream HTTP exchange failed after the connection was up.
    #[error("upstream {addr} failed: {source}")]
    Upstream {
        /// The endpoint.
        addr: EndpointAddr,
        /// The client's account (ours for pooled HTTP/1, hyper's otherwise).
        source: UpstreamError,
    },
    /// The upstream handshake (HTTP/2 settings exchange) failed.
    #[error("upstream {addr} handshake failed: {source}")]
    Handshake {
        /// The endpoint.
        addr: EndpointAddr,
        /// hyper's account.
        source: hyper::Error,
    },
    /// A deadline passed before a response head arrived: the request timeout, the client's
    /// `grpc-timeout`, the per-try timeout of a last attempt, or the stream idle timeout (nothing
    /// moved either way while waiting). The request may have been acted
    /// on, so it is not retryable as an error; the retry stage decides on per-try timeouts itself.
    #[error("{} passed before the upstream answered", .0.name())]
    Timeout(TimeoutKind),
}

/// How an upstream exchange failed, by the client that ran it.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// hyper's (HTTP/2, upgrades).
    #[error(transparent)]
    Hyper(#[from] hyper::Error),
    /// Ours (pooled HTTP/1).
    #[error(transparent)]
    H1(#[from] crate::http::h1::Error),
}

impl UpstreamError {
    /// Whether the upstream said it never processed the request (RFC 9113 §8.7): it reset the
    /// stream with REFUSED_STREAM, or its GOAWAY named a last stream below this one. A GOAWAY
    /// error reaches only the streams above that id; the ones at or below it run on, and end
    /// with an I/O error if the connection is cut.
    pub fn was_refused(&self) -> bool {
        self.h2_cause().is_some_and(|h2| {
            h2.is_remote()
                && (h2.is_go_away()
                    || h2.is_reset() && h2.reason() == Some(h2::Reason::REFUSED_STREAM))
        })
    }

    /// Whether the request's own body failed, not the upstream: the client broke off its
    /// upload or broke its framing. Ours says so; hyper's h2 client resets the stream itself
    /// (a reset of our own, neither the peer's nor the h2 library's) when the body it sends
    /// fails, and hyper's HTTP/1 client carries the body's error as a cause.
    pub fn is_client_side(&self) -> bool {
        match self {
            UpstreamError::H1(e) => matches!(e, crate::http::h1::Error::RequestBody(_)),
            UpstreamError::Hyper(e) => {
                self.h2_cause()
                    .is_some_and(|h2| h2.is_reset() && !h2.is_remote() && !h2.is_library())
                    || causes(e).any(|c| c.is::<crate::http::body::BodyError>())
            }
        }
    }

    fn h2_cause(&self) -> Option<&h2::Error> {
        let UpstreamError::Hyper(e) = self else {
            return None;
        };
        causes(e).find_map(|c| c.downcast_ref::<h2::Error>())
    }
}

/// The chain of errors beneath `e`.
fn causes<'e>(
    e: &'e (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'e (dyn std::error::Error + 'static)> {
    std::iter::successors(e.source(), |c| c.source())
}

impl ProxyError {
    /// Whether sending the request again (to any endpoint) cannot duplicate its effect.
    pub fn is_retryable(&self) -> bool {
        match self {
            ProxyError::Connect { .. } | ProxyError::Handshake { .. } => true,
            ProxyError::Upstream { source, .. } => source.was_refused(),
            _ => false,
        }
    }

    /// Whether the upstream is not to blame: the request was the problem (malformed, or its
    /// body broke off), so breakers and the balancer count nothing.
    pub fn is_client_side(&self) -> bool {
        match self {
            ProxyError::BadRequest(_) | ProxyError::BodyTimeout | ProxyError::ConnectRefused => {
                true
            }
            ProxyError::Upstream { source, .. } => source.is_client_side(),
            _ => false,
        }
    }

    /// Whether the client's connection cannot carry another request after this answer: the
    /// request's framing is in doubt.
    fn ends_the_connection(&self) -> bool {
        self.is_client_side()
    }

    /// The `weir-proxy-error` value and metric label.
    pub fn name(&self) -> &'static str {
        match self {
            ProxyError::BadRequest(_) => "bad-request",
            ProxyError::BodyTimeout => "request-body-timeout",
            ProxyError::ConnectRefused => "connect-refused",
            ProxyError::NoRoute => "no-route",
            ProxyError::NoBackend => "no-backend",
            ProxyError::UnknownService(_) => "unknown-service",
            ProxyError::NoEndpoints(_) => "no-endpoints",
            ProxyError::NoReadyEndpoints(_) => "no-ready-endpoints",
            ProxyError::RateLimited(_) => "rate-limited",
            ProxyError::RouteCircuitOpen => "route-circuit-open",
            ProxyError::Shed(s) => s.name(),
            ProxyError::Loop => "loop",
            ProxyError::Connect { .. } => "connect-failed",
            ProxyError::Upstream { source, .. } if source.is_client_side() => "request-body-failed",
            ProxyError::Upstream { .. } => "upstream-failed",
            ProxyError::Handshake { .. } => "handshake-failed",
            ProxyError::Timeout(kind) => kind.name(),
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            ProxyError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ProxyError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            ProxyError::ConnectRefused => StatusCode::METHOD_NOT_ALLOWED,
            ProxyError::NoRoute => StatusCode::NOT_FOUND,
            ProxyError::NoBackend => StatusCode::INTERNAL_SERVER_ERROR,
            ProxyError::UnknownService(_)
            | ProxyError::NoEndpoints(_)
            | ProxyError::NoReadyEndpoints(_)
            | ProxyError::RouteCircuitOpen
            | ProxyError::Shed(_) => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
            ProxyError::Upstream { source, .. } if source.is_client_side() => {
                StatusCode::BAD_REQUEST
            }
            ProxyError::Loop => StatusCode::LOOP_DETECTED,
            ProxyError::Connect { .. }
            | ProxyError::Upstream { .. }
            | ProxyError::Handshake { .. } => StatusCode::BAD_GATEWAY,
            ProxyError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    fn grpc_status(&self) -> &'static str {
        match self {
            e if e.is_client_side() => "13",
            ProxyError::NoRoute | ProxyError::NoBackend => "12",
            ProxyError::Timeout(_) => "4",
            ProxyError::RateLimited(_) => "8",
            _ => "14",
        }
    }
}

/// Who reads an error's account: another workload of the mesh (outbound, inbound), or a client
/// at the edge (the gateway), which learns the cause but nothing of the mesh's insides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// The whole account: endpoint addresses, service names, the OS error.
    Mesh,
    /// The cause alone (`weir-proxy-error` is the same); the whole account goes to the log.
    Edge,
}

impl ProxyError {
    /// The response body's (or `grpc-message`'s) account of the error for `audience`.
    fn account(&self, audience: Audience) -> std::borrow::Cow<'static, str> {
        let edge = match self {
            _ if audience == Audience::Mesh => None,
            ProxyError::UnknownService(_) => Some("the route's backend service is unknown"),
            ProxyError::NoEndpoints(_) => Some("no ready endpoint for the route's backend"),
            ProxyError::NoReadyEndpoints(_) => {
                Some("every endpoint of the route's backend is ejected")
            }
            ProxyError::Connect { .. } => Some("connect to the upstream failed"),
            ProxyError::Upstream { source, .. } if source.is_client_side() => {
                Some("the request body failed")
            }
            ProxyError::Upstream { .. } => Some("the upstream failed"),
            ProxyError::Handshake { .. } => Some("the upstream handshake failed"),
            _ => None,
        };
        edge.map_or_else(|| self.to_string().into(), Into::into)
    }
}

/// The one map from errors to responses. gRPC clients get a trailers-only response whose
/// `grpc-status` they understand; everyone gets `weir-proxy-error`; `audience` decides how
/// much the account says.
pub fn rescue(e: &ProxyError, grpc: bool, audience: Audience) -> Response<ProxyBody> {
    let mut resp = if grpc {
        let mut r = Response::new(ProxyBody::empty());
        let h = r.headers_mut();
        h.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc"),
        );
        h.insert("grpc-status", HeaderValue::from_static(e.grpc_status()));
        if let Ok(msg) = HeaderValue::from_str(&e.account(audience)) {
            h.insert("grpc-message", msg);
        }
        r
    } else {
        let mut r = Response::new(ProxyBody::full(format!("{}\n", e.account(audience))));
        *r.status_mut() = e.status();
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        r
    };
    resp.headers_mut()
        .insert(ERROR_HEADER, HeaderValue::from_static(e.name()));
    if let ProxyError::ConnectRefused = e {
        // RFC 9110 §15.5.6: a 405 lists what the target does take.
        resp.headers_mut().insert(
            http::header::ALLOW,
            HeaderValue::from_static("GET, HEAD, POST, PUT, DELETE, OPTIONS, TRACE, PATCH"),
        );
    }
    if let ProxyError::RateLimited(wait) = e {
        resp.headers_mut()
            .insert(http::header::RETRY_AFTER, wait.header_value());
    }
    if e.ends_the_connection() {
        resp.headers_mut()
            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_failures_are_retryable_and_answer_502() {
        let e = ProxyError::Connect {
            addr: EndpointAddr(([127, 0, 0, 1], 1).into()),
            source: io::ErrorKind::ConnectionRefused.into(),
        };
        assert!(e.is_retryable());
        let r = rescue(&e, false, Audience::Mesh);
        assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
        assert_eq!(r.headers()[ERROR_HEADER], "connect-failed");
    }

    #[test]
    fn grpc_clients_get_a_grpc_status() {
        let r = rescue(&ProxyError::NoEndpoints("svc".into()), true, Audience::Mesh);
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["grpc-status"], "14");
    }

    #[test]
    fn timeouts_answer_504_naming_the_deadline_and_deadline_exceeded_to_grpc() {
        for kind in [
            TimeoutKind::Request,
            TimeoutKind::PerTry,
            TimeoutKind::Grpc,
            TimeoutKind::Idle,
        ] {
            let e = ProxyError::Timeout(kind);
            assert!(!e.is_retryable(), "the upstream may have acted on it");
            let r = rescue(&e, false, Audience::Mesh);
            assert_eq!(r.status(), StatusCode::GATEWAY_TIMEOUT);
            assert_eq!(r.headers()[ERROR_HEADER], kind.name());
            let g = rescue(&e, true, Audience::Mesh);
            assert_eq!(g.status(), StatusCode::OK);
            assert_eq!(g.headers()["grpc-status"], "4");
        }
    }

    #[test]
    fn a_rate_limited_request_gets_429_with_retry_after_or_resource_exhausted() {
        let e = ProxyError::RateLimited(RetryAfter(std::time::Duration::from_millis(1500)));
        let r = rescue(&e, false, Audience::Mesh);
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()[http::header::RETRY_AFTER], "2");
        assert_eq!(r.headers()[ERROR_HEADER], "rate-limited");
        let g = rescue(&e, true, Audience::Mesh);
        assert_eq!(g.headers()["grpc-status"], "8");
    }

    #[test]
    fn shed_requests_name_why_in_the_error_header() {
        let r = rescue(&ProxyError::Shed(Shed::QueueFull), false, Audience::Mesh);
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[ERROR_HEADER], "overloaded");
        let r = rescue(&ProxyError::RouteCircuitOpen, true, Audience::Mesh);
        assert_eq!(r.headers()["grpc-status"], "14");
        assert_eq!(r.headers()[ERROR_HEADER], "route-circuit-open");
    }

    #[test]
    fn a_request_body_that_broke_off_is_the_clients_fault() {
        let body = crate::http::body::BodyError::Length("shorter than its Content-Length");
        let e = ProxyError::Upstream {
            addr: EndpointAddr(([127, 0, 0, 1], 1).into()),
            source: crate::http::h1::Error::RequestBody(Box::new(body)).into(),
        };
        assert!(e.is_client_side() && !e.is_retryable());
        assert_eq!(crate::resilience::outcome::error_is_failure(&e), None);
        let r = rescue(&e, false, Audience::Mesh);
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        assert_eq!(r.headers()[ERROR_HEADER], "request-body-failed");
        assert_eq!(r.headers()[http::header::CONNECTION], "close");
        assert_eq!(
            rescue(&e, true, Audience::Mesh).headers()["grpc-status"],
            "13"
        );
        let reset = ProxyError::Upstream {
            addr: EndpointAddr(([127, 0, 0, 1], 1).into()),
            source: crate::http::h1::Error::Closed.into(),
        };
        assert!(!reset.is_client_side());
        assert_eq!(
            crate::resilience::outcome::error_is_failure(&reset),
            Some(true)
        );
    }

    #[test]
    fn at_the_edge_the_account_names_no_address_service_or_os_error() {
        let addr = EndpointAddr(([10, 1, 2, 3], 8080).into());
        for (e, edge) in [
            (
                ProxyError::Connect {
                    addr,
                    source: io::ErrorKind::ConnectionRefused.into(),
                },
                "connect to the upstream failed\n",
            ),
            (
                ProxyError::Upstream {
                    addr,
                    source: crate::http::h1::Error::Closed.into(),
                },
                "the upstream failed\n",
            ),
            (
                ProxyError::NoEndpoints("billing.internal".into()),
                "no ready endpoint for the route's backend\n",
            ),
            (
                ProxyError::UnknownService("billing.internal".into()),
                "the route's backend service is unknown\n",
            ),
        ] {
            let body = body_text;
            let mesh = rescue(&e, false, Audience::Mesh);
            let name = mesh.headers()[ERROR_HEADER].clone();
            let inside = body(mesh);
            assert!(
                inside.contains("10.1.2.3:8080") || inside.contains("billing.internal"),
                "{inside}"
            );
            let r = rescue(&e, false, Audience::Edge);
            assert_eq!(r.headers()[ERROR_HEADER], name, "the same cause");
            assert_eq!(body(r), edge);
            let g = rescue(&e, true, Audience::Edge);
            let msg = g.headers()["grpc-message"]
                .to_str()
                .expect("ascii")
                .to_owned();
            assert_eq!(format!("{msg}\n"), edge);
        }
        // What names nothing inside reads the same at the edge.
        let e = ProxyError::BadRequest("duplicate Host");
        let r = rescue(&e, false, Audience::Edge);
        assert_eq!(body_text(r), "malformed request: duplicate Host\n");
    }

    fn body_text(r: Response<ProxyBody>) -> String {
        match r.into_body() {
            ProxyBody::Full(Some(b)) => String::from_utf8_lossy(&b).into_owned(),
            _ => panic!("a whole body"),
        }
    }

    #[test]
    fn bad_requests_close_the_connection() {
        let r = rescue(
            &ProxyError::BadRequest("duplicate Host"),
            false,
            Audience::Mesh,
        );
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        assert_eq!(r.headers()[http::header::CONNECTION], "close");
    }
}
