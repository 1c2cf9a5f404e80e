//! Counts a response on its route's metrics as a success or a failure: by HTTP status, or for a
//! gRPC response by its `grpc-status` — from the head of a trailers-only response, else from the
//! trailers once the body ends (only gRPC responses without a status in the head are wrapped).

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body::{Body, Frame};

use crate::{
    http::body::{BodyError, ProxyBody},
    metrics::RouteMetrics,
    resilience::grpc::{self, code},
};

/// gRPC's CANCELLED: the client went away before the trailers.
const CANCELLED: u32 = 1;

/// Records the response head's latency `secs` and counts `resp` now, or, for a streaming gRPC
/// response, when its trailers pass.
pub fn count(
    metrics: &Arc<RouteMetrics>,
    resp: Response<ProxyBody>,
    secs: f64,
) -> Response<ProxyBody> {
    if resp.status() != StatusCode::OK || !grpc::is_grpc(resp.headers()) {
        metrics.response(resp.status().as_u16(), secs);
        return resp;
    }
    metrics.head_sent(secs);
    if let Some(status) = grpc::status(resp.headers()) {
        metrics.count_grpc(status);
        return resp;
    }
    let metrics = Some(metrics.clone());
    resp.map(|inner| ProxyBody::Classified(Box::new(Classified { inner, metrics })))
}

/// A gRPC response body that counts the response when its trailers pass: `grpc-status` from
/// them, UNKNOWN if the stream ends or fails without one, CANCELLED if dropped before its end.
#[derive(Debug)]
pub struct Classified {
    inner: ProxyBody,
    /// Taken when the response is counted.
    metrics: Option<Arc<RouteMetrics>>,
}

impl Classified {
    /// Polls the inner body, counting the response when its outcome shows.
    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(trailers) = frame.trailers_ref() {
                    self.finish(grpc::status(trailers).unwrap_or(code::UNKNOWN));
                }
            }
            Poll::Ready(Some(Err(_)) | None) => self.finish(code::UNKNOWN),
            Poll::Pending => {}
        }
        polled
    }

    /// The inner body's.
    pub(crate) fn inner(&self) -> &ProxyBody {
        &self.inner
    }

    fn finish(&mut self, status: u32) {
        if let Some(m) = self.metrics.take() {
            m.count_grpc(status);
        }
    }
}

impl Drop for Classified {
    fn drop(&mut self) {
        let status = if self.inner.is_end_stream() {
            code::UNKNOWN
        } else {
            CANCELLED
        };
        self.finish(status);
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;
    use crate::metrics::{install, Direction};

    /// The value of the `weir_responses_total` series of `service` whose labels include `want`.
    fn responses(service: &str, want: &[&str]) -> f64 {
        let text = install().render();
        text.lines()
            .filter(|l| l.starts_with("weir_responses_total{"))
            .filter(|l| l.contains(&format!("service=\"{service}\"")))
            .filter(|l| want.iter().all(|w| l.contains(w)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    fn grpc_response(status: Option<&'static str>, body: ProxyBody) -> Response<ProxyBody> {
        let mut b = Response::builder().header("content-type", "application/grpc");
        if let Some(s) = status {
            b = b.header("grpc-status", s);
        }
        b.body(body).expect("test response")
    }

    #[test]
    fn a_trailers_only_200_with_grpc_status_14_is_a_failure_at_once() {
        install();
        let m = RouteMetrics::new(Direction::Gateway, "classify-head", "r");
        let resp = count(&m, grpc_response(Some("14"), ProxyBody::empty()), 0.001);
        assert!(matches!(resp.body(), ProxyBody::Empty), "not wrapped");
        assert_eq!(
            responses(
                "classify-head",
                &["grpc_status=\"14\"", "classification=\"failure\""]
            ),
            1.0
        );
        count(&m, grpc_response(Some("0"), ProxyBody::empty()), 0.001);
        assert_eq!(
            responses("classify-head", &["classification=\"success\""]),
            1.0
        );
    }

    #[test]
    fn plain_http_is_classified_by_status_class() {
        install();
        let m = RouteMetrics::new(Direction::Gateway, "classify-http", "r");
        for status in [200, 404, 503] {
            let resp = Response::builder()
                .status(status)
                .body(ProxyBody::empty())
                .expect("test response");
            count(&m, resp, 0.001);
        }
        assert_eq!(
            responses("classify-http", &["classification=\"success\""]),
            2.0
        );
        assert_eq!(
            responses(
                "classify-http",
                &["status_code=\"503\"", "classification=\"failure\""]
            ),
            1.0
        );
    }

    #[tokio::test]
    async fn a_streaming_grpc_response_is_counted_when_its_body_ends() {
        install();
        let m = RouteMetrics::new(Direction::Gateway, "classify-stream", "r");
        let resp = count(&m, grpc_response(None, ProxyBody::full("msg")), 0.001);
        assert_eq!(responses("classify-stream", &[]), 0.0, "not yet counted");
        resp.into_body().collect().await.expect("a full body");
        // No trailers at all: the outcome is UNKNOWN, a failure.
        assert_eq!(
            responses(
                "classify-stream",
                &["grpc_status=\"2\"", "classification=\"failure\""]
            ),
            1.0
        );
    }

    #[test]
    fn a_streaming_grpc_response_dropped_early_is_counted_once_as_cancelled() {
        install();
        let m = RouteMetrics::new(Direction::Gateway, "classify-drop", "r");
        drop(count(
            &m,
            grpc_response(None, ProxyBody::full("msg")),
            0.001,
        ));
        assert_eq!(responses("classify-drop", &["grpc_status=\"1\""]), 1.0);
        assert_eq!(responses("classify-drop", &[]), 1.0);
    }
}
