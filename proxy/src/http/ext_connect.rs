//! RFC 8441's extended CONNECT (WebSocket over HTTP/2) as the HTTP/1.1 upgrade it stands for:
//! the request rewritten on arrival, the upstream's `101` turned back into the `200` the
//! HTTP/2 client waits for.

use base64::{engine::general_purpose::STANDARD, Engine};
use http::{header, request::Parts, HeaderValue, Method, Response, StatusCode};

use crate::{error::ProxyError, http::headers::is_tchar};

/// RFC 6455 §1.3: what a server appends to the key before hashing it into its accept value.
const WEBSOCKET_GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Marks an extended CONNECT rewritten by [`to_upgrade`] (request extension): the upstream's
/// answer is checked against it and rewritten back ([`answer`]).
#[derive(Debug, Clone)]
pub struct ExtendedConnect {
    /// The `Sec-WebSocket-Accept` a WebSocket upstream must answer with; `None` for another
    /// protocol.
    accept: Option<HeaderValue>,
}

/// Rewrites an HTTP/2 CONNECT that names a `:protocol` into the request HTTP/1.1 spells it as
/// (RFC 8441 §5): `GET` of its `:path` with `Upgrade: <protocol>`, so routes, filters and
/// policy see a WebSocket handshake whichever version carried it. The HTTP/2 client sends no
/// `Sec-WebSocket-Key` (its stream needs none); the HTTP/1.1 hop does, so a fresh one is made
/// and the accept it calls for is kept. A plain CONNECT is left as it is.
pub fn to_upgrade(parts: &mut Parts) -> Result<(), ProxyError> {
    let Some(protocol) = parts.extensions.remove::<hyper::ext::Protocol>() else {
        return Ok(());
    };
    let name = protocol.as_str();
    // An `Upgrade` token (RFC 9110 §7.8): protocol-name ["/" protocol-version].
    if name.is_empty() || !name.bytes().all(|b| b == b'/' || is_tchar(b)) {
        return Err(ProxyError::BadRequest("invalid :protocol"));
    }
    let upgrade =
        HeaderValue::from_str(name).map_err(|_| ProxyError::BadRequest("invalid :protocol"))?;
    let accept = if name.eq_ignore_ascii_case("websocket") {
        let key = STANDARD.encode(rand::random::<[u8; 16]>());
        let accept = accept_for(key.as_bytes());
        let key = HeaderValue::try_from(key).expect("base64 is a valid header value");
        parts.headers.insert(header::SEC_WEBSOCKET_KEY, key);
        Some(accept)
    } else {
        None
    };
    parts.method = Method::GET;
    parts.headers.insert(header::UPGRADE, upgrade);
    parts
        .headers
        .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    parts.extensions.insert(ExtendedConnect { accept });
    Ok(())
}

/// Whether the request is an extended CONNECT that [`to_upgrade`] rewrote.
pub fn is_extended(parts: &Parts) -> bool {
    parts.extensions.get::<ExtendedConnect>().is_some()
}

/// The upstream's answer to a rewritten extended CONNECT, for the HTTP/2 client: a `101`
/// becomes `200` (the stream is the tunnel, RFC 8441 §5) without the fields of the HTTP/1.1
/// handshake; any other 2xx is refused, since the client would take it for an open tunnel to
/// an upstream that never switched; the rest (a 403, a 426) goes back as it came. A WebSocket
/// upstream's `101` must carry the accept of the key it was sent (RFC 6455 §4.1): it is the
/// proxy that speaks WebSocket's HTTP/1.1 handshake on the client's behalf.
pub fn answer<B>(x: &ExtendedConnect, resp: &mut Response<B>) -> Result<(), &'static str> {
    let status = resp.status();
    if status != StatusCode::SWITCHING_PROTOCOLS {
        return match status.is_success() {
            true => Err("2xx to a WebSocket handshake: the upstream did not switch protocols"),
            false => Ok(()),
        };
    }
    if let Some(want) = &x.accept {
        if resp.headers().get(header::SEC_WEBSOCKET_ACCEPT) != Some(want) {
            return Err("101 without the Sec-WebSocket-Accept of the handshake's key");
        }
    }
    *resp.status_mut() = StatusCode::OK;
    let headers = resp.headers_mut();
    headers.remove(header::SEC_WEBSOCKET_ACCEPT);
    headers.remove(header::UPGRADE);
    headers.remove(header::CONNECTION);
    Ok(())
}

/// RFC 6455 §4.2.2: base64 of the SHA-1 of the key and the GUID.
fn accept_for(key: &[u8]) -> HeaderValue {
    let mut sha = sha1_smol::Sha1::new();
    sha.update(key);
    sha.update(WEBSOCKET_GUID);
    let accept = STANDARD.encode(sha.digest().bytes());
    HeaderValue::try_from(accept).expect("base64 is a valid header value")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extended(protocol: &str) -> Parts {
        let (mut parts, ()) = http::Request::builder()
            .method(Method::CONNECT)
            .version(http::Version::HTTP_2)
            .uri("http://ws.test/chat")
            .body(())
            .expect("request")
            .into_parts();
        parts
            .extensions
            .insert(hyper::ext::Protocol::from(protocol));
        parts
    }

    #[test]
    fn the_accept_is_rfc_6455_s_worked_example() {
        assert_eq!(
            accept_for(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn a_websocket_connect_becomes_a_get_with_upgrade_and_a_fresh_key() {
        let mut a = extended("websocket");
        to_upgrade(&mut a).expect("rewritten");
        assert_eq!(a.method, Method::GET);
        assert_eq!(a.uri.path(), "/chat");
        assert_eq!(a.headers[header::UPGRADE], "websocket");
        assert_eq!(a.headers[header::CONNECTION], "upgrade");
        assert!(is_extended(&a));
        let key = a.headers[header::SEC_WEBSOCKET_KEY].clone();
        assert_eq!(STANDARD.decode(key.as_bytes()).expect("base64").len(), 16);
        let mut b = extended("websocket");
        to_upgrade(&mut b).expect("rewritten");
        assert_ne!(
            b.headers[header::SEC_WEBSOCKET_KEY],
            key,
            "a key per request"
        );
    }

    #[test]
    fn another_protocol_gets_no_key_and_a_plain_connect_is_left_alone() {
        let mut p = extended("connect-udp");
        to_upgrade(&mut p).expect("rewritten");
        assert_eq!(p.headers[header::UPGRADE], "connect-udp");
        assert!(!p.headers.contains_key(header::SEC_WEBSOCKET_KEY));
        let (mut plain, ()) = http::Request::builder()
            .method(Method::CONNECT)
            .uri("db.test:5432")
            .body(())
            .expect("request")
            .into_parts();
        to_upgrade(&mut plain).expect("left alone");
        assert_eq!(plain.method, Method::CONNECT);
        assert!(!is_extended(&plain));
    }

    #[test]
    fn a_protocol_that_is_no_token_is_refused() {
        for bad in ["", "web socket", "a,b", "ws\u{1}"] {
            let mut p = extended("x");
            p.extensions.insert(hyper::ext::Protocol::from(bad));
            assert!(to_upgrade(&mut p).is_err(), "{bad:?}");
        }
    }

    fn answered(status: u16, accept: Option<&str>) -> Response<()> {
        let mut b = Response::builder()
            .status(status)
            .header(header::UPGRADE, "websocket")
            .header(header::CONNECTION, "upgrade")
            .header(header::SEC_WEBSOCKET_PROTOCOL, "chat");
        if let Some(a) = accept {
            b = b.header(header::SEC_WEBSOCKET_ACCEPT, a);
        }
        b.body(()).expect("response")
    }

    #[test]
    fn a_101_with_the_right_accept_becomes_200_and_anything_else_2xx_is_refused() {
        let x = ExtendedConnect {
            accept: Some(accept_for(b"dGhlIHNhbXBsZSBub25jZQ==")),
        };
        let mut ok = answered(101, Some("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="));
        answer(&x, &mut ok).expect("switched");
        assert_eq!(ok.status(), StatusCode::OK);
        for gone in [
            header::UPGRADE,
            header::CONNECTION,
            header::SEC_WEBSOCKET_ACCEPT,
        ] {
            assert!(!ok.headers().contains_key(&gone), "{gone}");
        }
        assert_eq!(ok.headers()[header::SEC_WEBSOCKET_PROTOCOL], "chat");
        assert!(answer(&x, &mut answered(101, Some("d3Jvbmc="))).is_err());
        assert!(answer(&x, &mut answered(101, None)).is_err());
        assert!(answer(&x, &mut answered(200, None)).is_err());
        let mut refused = answered(403, None);
        answer(&x, &mut refused).expect("passed back");
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    }
}
