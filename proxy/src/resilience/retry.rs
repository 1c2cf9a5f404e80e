//! The retry decision as data: may this attempt's outcome be tried again?

use http::{HeaderMap, Method, StatusCode};

use super::{backoff::Backoff, grpc};
use crate::model;

/// Retries after the first attempt when a route's `retry` leaves `attempts` out (Linkerd's and
/// Envoy's default of one).
pub const DEFAULT_RETRIES: u32 = 1;

/// What became of one attempt, as far as retrying cares.
#[derive(Debug, Clone, Copy)]
pub enum Outcome<'a> {
    /// Provably never processed: the connect failed, the upstream refused the stream
    /// (HTTP/2 `REFUSED_STREAM`, or a GOAWAY above the stream's id), or a reused pooled
    /// connection was found closed before the request went out. Always safe to retry.
    NotSent,
    /// The exchange broke (reset, connection closed, per-try timeout) before a response head:
    /// the upstream may have acted on the request.
    Lost,
    /// A response head arrived (for gRPC: with `grpc-status` if it is a trailers-only response).
    Response {
        /// The HTTP status.
        status: StatusCode,
        /// The response headers.
        headers: &'a HeaderMap,
    },
}

/// The request side of the decision.
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    /// The request's method (idempotency).
    pub method: &'a Method,
    /// Whether the request is gRPC ([`grpc::is_grpc`] on the request headers).
    pub grpc: bool,
    /// Retries already made before this outcome (0 for the first attempt).
    pub retries_done: u32,
    /// Whether any part of this response already went to the client: a retry would splice two
    /// responses into one.
    pub response_started: bool,
}

/// The decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Answer with this outcome.
    No,
    /// Try again (if the budget, the body replay and the deadline allow).
    Yes,
}

/// A route's retry rule, compiled once per registry snapshot.
///
/// `attempts` follows Gateway API (GEP-1731): the number of *retries*, so `attempts: 3` makes at
/// most four requests and `attempts: 0` none beyond the first. A route without `retry` still
/// retries a [`Outcome::NotSent`] once: nothing reached the upstream, so it costs a connect and
/// a budget token and cannot duplicate an effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryRule {
    retries: u32,
    /// Whether anything beyond `NotSent` is retried (the route has a `retry` block).
    configured: bool,
    /// Bit `n` set = HTTP status `n` is retryable.
    codes: [u64; 10],
    /// Bit `n` set = gRPC status `n` is retryable.
    grpc_codes: u32,
    non_idempotent: bool,
    backoff: Backoff,
}

impl RetryRule {
    /// From a route's `retry`: `codes` empty means every 5xx; gRPC requests retry on
    /// UNAVAILABLE; non-idempotent methods only with `nonIdempotent: true`.
    pub fn new(policy: Option<&model::RetryPolicy>) -> Self {
        let Some(p) = policy else {
            return Self {
                retries: DEFAULT_RETRIES,
                configured: false,
                codes: [0; 10],
                grpc_codes: 0,
                non_idempotent: false,
                backoff: Backoff::default(),
            };
        };
        let mut codes = [0u64; 10];
        let mut set = |c: u16| {
            if let Some(word) = codes.get_mut(usize::from(c / 64)) {
                *word |= 1 << (c % 64);
            }
        };
        if p.codes.is_empty() {
            (500..=599).for_each(&mut set);
        } else {
            p.codes.iter().copied().for_each(set);
        }
        Self {
            retries: p.attempts.unwrap_or(DEFAULT_RETRIES),
            configured: true,
            codes,
            grpc_codes: 1 << grpc::code::UNAVAILABLE,
            non_idempotent: p.non_idempotent,
            backoff: Backoff::new(p.backoff.map(|d| d.0)),
        }
    }

    /// The same rule retrying these gRPC statuses instead of UNAVAILABLE alone.
    pub fn with_grpc_codes(mut self, codes: &[u32]) -> Self {
        self.grpc_codes = codes.iter().filter(|c| **c < 32).fold(0, |m, c| m | 1 << c);
        self
    }

    /// Retries allowed after the first attempt.
    pub fn max_retries(&self) -> u32 {
        self.retries
    }

    /// The delay schedule between attempts.
    pub fn backoff(&self) -> &Backoff {
        &self.backoff
    }

    /// Whether `outcome` may be retried. The caller then still needs, in this order: a
    /// replayable body, a budget withdrawal, and room before the request deadline for the
    /// backoff.
    pub fn classify(&self, attempt: &Attempt<'_>, outcome: &Outcome<'_>) -> Retry {
        if attempt.response_started || attempt.retries_done >= self.retries {
            return Retry::No;
        }
        let safe = is_idempotent(attempt.method) || self.non_idempotent;
        let retry = match *outcome {
            Outcome::NotSent => true,
            Outcome::Lost => self.configured && safe,
            Outcome::Response { status, headers } => {
                self.configured && safe && self.retryable_response(attempt.grpc, status, headers)
            }
        };
        if retry {
            Retry::Yes
        } else {
            Retry::No
        }
    }

    fn retryable_response(&self, is_grpc: bool, status: StatusCode, headers: &HeaderMap) -> bool {
        if is_grpc {
            return match grpc::classify(status, headers, None) {
                grpc::Outcome::Failure(c) => c < 32 && self.grpc_codes & (1 << c) != 0,
                grpc::Outcome::Success | grpc::Outcome::Pending => false,
            };
        }
        let s = status.as_u16();
        self.codes
            .get(usize::from(s / 64))
            .is_some_and(|word| word & (1 << (s % 64)) != 0)
    }
}

/// RFC 9110 §9.2.2: sending these twice has the effect of sending them once.
pub fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;
    use crate::model::RetryPolicy;

    fn rule(codes: &[u16], attempts: Option<u32>, non_idempotent: bool) -> RetryRule {
        RetryRule::new(Some(&RetryPolicy {
            attempts,
            codes: codes.to_vec(),
            backoff: None,
            non_idempotent,
        }))
    }

    fn first(method: &Method) -> Attempt<'_> {
        Attempt {
            method,
            grpc: false,
            retries_done: 0,
            response_started: false,
        }
    }

    fn status(code: u16, headers: &HeaderMap) -> Outcome<'_> {
        Outcome::Response {
            status: StatusCode::from_u16(code).expect("valid status"),
            headers,
        }
    }

    #[test]
    fn a_route_without_retry_retries_only_what_was_never_sent_and_only_once() {
        let r = RetryRule::new(None);
        let h = HeaderMap::new();
        let post = first(&Method::POST);
        assert_eq!(r.classify(&post, &Outcome::NotSent), Retry::Yes);
        assert_eq!(r.classify(&first(&Method::GET), &Outcome::Lost), Retry::No);
        assert_eq!(
            r.classify(&first(&Method::GET), &status(503, &h)),
            Retry::No
        );
        let second = Attempt {
            retries_done: 1,
            ..post
        };
        assert_eq!(r.classify(&second, &Outcome::NotSent), Retry::No);
    }

    #[test]
    fn attempts_counts_retries_as_gateway_api_does() {
        let r = rule(&[], Some(3), false);
        let h = HeaderMap::new();
        let get = Method::GET;
        let decisions: Vec<_> = (0..5)
            .map(|done| {
                let a = Attempt {
                    retries_done: done,
                    ..first(&get)
                };
                r.classify(&a, &status(503, &h))
            })
            .collect();
        assert_eq!(
            decisions,
            [Retry::Yes, Retry::Yes, Retry::Yes, Retry::No, Retry::No]
        );
        let none = rule(&[], Some(0), false);
        assert_eq!(none.classify(&first(&get), &Outcome::NotSent), Retry::No);
    }

    #[test]
    fn without_codes_every_5xx_is_retried_and_nothing_else() {
        let r = rule(&[], None, false);
        let h = HeaderMap::new();
        let get = first(&Method::GET);
        for code in [500, 502, 503, 504, 599] {
            assert_eq!(r.classify(&get, &status(code, &h)), Retry::Yes, "{code}");
        }
        for code in [200, 404, 429, 499] {
            assert_eq!(r.classify(&get, &status(code, &h)), Retry::No, "{code}");
        }
    }

    #[test]
    fn listed_codes_replace_the_5xx_default() {
        let r = rule(&[429, 503], None, false);
        let h = HeaderMap::new();
        let get = first(&Method::GET);
        assert_eq!(r.classify(&get, &status(429, &h)), Retry::Yes);
        assert_eq!(r.classify(&get, &status(503, &h)), Retry::Yes);
        assert_eq!(r.classify(&get, &status(500, &h)), Retry::No);
    }

    #[test]
    fn non_idempotent_methods_retry_only_unsent_requests_unless_the_route_allows() {
        let h = HeaderMap::new();
        let post = first(&Method::POST);
        let strict = rule(&[], None, false);
        assert_eq!(strict.classify(&post, &Outcome::NotSent), Retry::Yes);
        assert_eq!(strict.classify(&post, &Outcome::Lost), Retry::No);
        assert_eq!(strict.classify(&post, &status(503, &h)), Retry::No);
        let allowed = rule(&[], None, true);
        assert_eq!(allowed.classify(&post, &Outcome::Lost), Retry::Yes);
        assert_eq!(allowed.classify(&post, &status(503, &h)), Retry::Yes);
    }

    #[test]
    fn a_reset_before_the_response_is_retried_for_idempotent_methods() {
        let r = rule(&[], None, false);
        for m in [
            Method::GET,
            Method::HEAD,
            Method::PUT,
            Method::DELETE,
            Method::OPTIONS,
        ] {
            assert_eq!(r.classify(&first(&m), &Outcome::Lost), Retry::Yes, "{m}");
        }
        assert_eq!(
            r.classify(&first(&Method::PATCH), &Outcome::Lost),
            Retry::No
        );
    }

    #[test]
    fn nothing_is_retried_once_the_response_streams_to_the_client() {
        let r = rule(&[], Some(5), true);
        let h = HeaderMap::new();
        let get = Method::GET;
        let streaming = Attempt {
            response_started: true,
            ..first(&get)
        };
        assert_eq!(r.classify(&streaming, &Outcome::NotSent), Retry::No);
        assert_eq!(r.classify(&streaming, &Outcome::Lost), Retry::No);
        assert_eq!(r.classify(&streaming, &status(503, &h)), Retry::No);
    }

    #[test]
    fn grpc_retries_unavailable_read_from_a_trailers_only_response() {
        let r = rule(&[], None, true);
        let post = Method::POST;
        let call = Attempt {
            grpc: true,
            ..first(&post)
        };
        let with_status = |code: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(grpc::GRPC_STATUS, HeaderValue::from_static(code));
            h
        };
        assert_eq!(
            r.classify(&call, &status(200, &with_status("14"))),
            Retry::Yes
        );
        assert_eq!(
            r.classify(&call, &status(200, &with_status("0"))),
            Retry::No
        );
        assert_eq!(
            r.classify(&call, &status(200, &with_status("13"))),
            Retry::No
        );
        assert_eq!(
            r.classify(&call, &status(200, &HeaderMap::new())),
            Retry::No,
            "a streaming gRPC response has no status yet"
        );
        assert_eq!(
            r.classify(&call, &status(503, &HeaderMap::new())),
            Retry::Yes,
            "a bare 503 is UNAVAILABLE to gRPC"
        );
        let internal = r.clone().with_grpc_codes(&[13]);
        assert_eq!(
            internal.classify(&call, &status(200, &with_status("13"))),
            Retry::Yes
        );
    }

    #[test]
    fn grpc_calls_are_posts_so_they_need_non_idempotent_to_retry_a_status() {
        let r = rule(&[], None, false);
        let post = Method::POST;
        let call = Attempt {
            grpc: true,
            ..first(&post)
        };
        let mut h = HeaderMap::new();
        h.insert(grpc::GRPC_STATUS, HeaderValue::from_static("14"));
        assert_eq!(r.classify(&call, &status(200, &h)), Retry::No);
    }
}
