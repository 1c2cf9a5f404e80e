//! Request trailers go upstream cleaned as the head was: no field that frames, routes,
//! authenticates, controls or describes the message (RFC 9110 §6.5.1), none that is hop-by-hop,
//! and none that the route sets or removes in the head.
//!
//! Without this a client could send in a trailer what the head may not carry: a `Host` or an
//! `Authorization`, an `X-Forwarded-For` of its choosing, or the very header a route's
//! `RequestHeaderModifier` strips, to a backend that merges trailers into its headers. And an
//! HTTP/2 upstream's client refuses connection-specific fields in trailers, failing the request.

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName};
use http_body::{Body, Frame, SizeHint};

use super::{
    body::{BodyError, ProxyBody},
    headers::{is_hop_by_hop, X_FORWARDED_FOR, X_FORWARDED_PROTO},
};

/// Fields that never pass in a request or response trailer section, besides the hop-by-hop
/// ones (`headers::is_hop_by_hop`).
const FORBIDDEN: [HeaderName; 20] = [
    // Framing and routing.
    header::CONTENT_LENGTH,
    header::TRAILER,
    header::HOST,
    // Authentication and its state.
    header::AUTHORIZATION,
    header::PROXY_AUTHORIZATION,
    header::WWW_AUTHENTICATE,
    header::PROXY_AUTHENTICATE,
    header::COOKIE,
    header::SET_COOKIE,
    // Controls and how to process the content.
    header::CACHE_CONTROL,
    header::PRAGMA,
    header::EXPECT,
    header::MAX_FORWARDS,
    header::RANGE,
    header::CONTENT_ENCODING,
    header::CONTENT_TYPE,
    header::CONTENT_RANGE,
    // What the gateway writes about the client.
    header::FORWARDED,
    X_FORWARDED_FOR,
    X_FORWARDED_PROTO,
];

/// Whether `name` may not appear in a trailer section.
pub fn forbidden(name: &HeaderName) -> bool {
    is_hop_by_hop(name) || FORBIDDEN.contains(name)
}

/// Removes from `trailers` every [`forbidden`] field and every field named in `also`.
pub fn clean(trailers: &mut HeaderMap, also: &[HeaderName]) {
    // Rebuilt only when something goes: most trailer sections (gRPC's) lose nothing.
    if !trailers
        .keys()
        .any(|name| forbidden(name) || also.contains(name))
    {
        return;
    }
    let old = std::mem::take(trailers);
    let mut name = None;
    for (k, v) in old {
        if k.is_some() {
            name = k;
        }
        if let Some(n) = name.as_ref().filter(|n| !forbidden(n) && !also.contains(n)) {
            trailers.append(n.clone(), v);
        }
    }
}

/// A request body whose trailers are [`clean`]ed on their way through.
#[derive(Debug)]
pub struct Cleaned {
    body: ProxyBody,
    also: Option<Arc<[HeaderName]>>,
}

impl Cleaned {
    /// `body`, with trailers cleaned of [`forbidden`] fields and `also`; as it is when it cannot
    /// carry trailers (empty, or made whole by the proxy) or is cleaned already.
    pub fn wrap(body: ProxyBody, also: Option<&Arc<[HeaderName]>>) -> ProxyBody {
        if body.is_end_stream() || matches!(body, ProxyBody::Full(_) | ProxyBody::CleanTrailers(_))
        {
            return body;
        }
        ProxyBody::CleanTrailers(Box::new(Cleaned {
            body,
            also: also.filter(|a| !a.is_empty()).cloned(),
        }))
    }

    /// The body underneath.
    pub fn inner(&self) -> &ProxyBody {
        &self.body
    }

    /// Polls the body underneath, cleaning a trailers frame.
    pub fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        Pin::new(&mut self.body).poll_frame(cx).map(|f| {
            f.map(|r| {
                r.map(|frame| match frame.into_trailers() {
                    Ok(mut t) => {
                        clean(&mut t, self.also.as_deref().unwrap_or_default());
                        Frame::trailers(t)
                    }
                    Err(frame) => frame,
                })
            })
        })
    }

    /// The body underneath's size hint.
    pub fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_drops_forbidden_and_named_fields_and_keeps_the_rest_in_order() {
        let mut t = HeaderMap::new();
        for (k, v) in [
            ("x-a", "1"),
            ("host", "evil.test"),
            ("content-length", "3"),
            ("keep-alive", "x"),
            ("x-secret", "s"),
            ("x-a", "2"),
            ("authorization", "Bearer t"),
            ("x-forwarded-for", "10.0.0.1"),
            ("grpc-status", "0"),
        ] {
            t.append(HeaderName::from_static(k), v.parse().expect("value"));
        }
        clean(&mut t, &[HeaderName::from_static("x-secret")]);
        let kept: Vec<_> = t
            .iter()
            .map(|(k, v)| (k.as_str(), v.to_str().expect("ascii")))
            .collect();
        assert_eq!(kept, [("x-a", "1"), ("x-a", "2"), ("grpc-status", "0")]);
    }
}
