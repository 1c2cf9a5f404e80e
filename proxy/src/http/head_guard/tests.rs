//! The guard in front of the real HTTP/1 server (`serve_http1`), driven over an in-memory pipe.

use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, DuplexStream};

use crate::{
    config::H2Limits,
    drain::{self, DrainTx},
    http::{
        body::ProxyBody,
        server::{serve_http1, ServerConfig},
    },
};

/// Generous: a hung connection fails the test instead of hanging it.
const DEADLINE: Duration = Duration::from_secs(10);
const MAX_HEAD: usize = 8192;

const CL_REQUEST: &[u8] = b"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello";
const CHUNKED_REQUEST: &[u8] = b"POST /b HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n\
    3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Checksum: 1\r\n\r\n";

/// Every framing the guard must refuse, by name.
const REFUSED: &[(&str, &[u8])] = &[
    ("cl then te", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    ("te then cl", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n"),
    ("equal duplicate cl", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc"),
    ("cl list", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\n\r\nabc"),
    ("chunked then gzip", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n"),
    ("xchunked", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n"),
    ("te twice", b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    ("te on http/1.0", b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    ("bare lf everywhere", b"GET / HTTP/1.1\nHost: a\n\n"),
    ("bare lf in one line", b"GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n"),
    ("bare lf ending the head", b"GET / HTTP/1.1\r\nHost: a\r\n\n"),
    ("bare cr", b"GET / HTTP/1.1\r\nHost: a\rX: y\r\n\r\n"),
    ("nul in value", b"GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n"),
    ("control in name", b"GET / HTTP/1.1\r\nHost: a\r\nX\x01y: b\r\n\r\n"),
    ("del in value", b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x7fb\r\n\r\n"),
    ("space before colon", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length : 3\r\n\r\nabc"),
    ("tab before colon", b"GET / HTTP/1.1\r\nHost\t: a\r\n\r\n"),
    ("obs-fold", b"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n"),
    ("missing host", b"GET / HTTP/1.1\r\nX: a\r\n\r\n"),
    ("duplicate host", b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
    ("userinfo in host", b"GET / HTTP/1.1\r\nHost: u@a\r\n\r\n"),
    ("space in host", b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n"),
    ("host port over 65535", b"GET / HTTP/1.1\r\nHost: a:99999\r\n\r\n"),
    ("bad host on http/1.0", b"GET / HTTP/1.0\r\nHost: a/b\r\n\r\n"),
];

/// Answers 200 with the request body, or switches protocols on `Upgrade: echo` and echoes.
async fn handler(parts: Box<http::request::Parts>, body: ProxyBody) -> Response<ProxyBody> {
    let mut req = Request::from_parts(*parts, body);
    let upgrade = req.headers().get(header::UPGRADE).cloned();
    if upgrade.as_ref().is_some_and(|u| u == "echo") {
        let on = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            if let Ok(up) = on.await {
                let (mut r, mut w) = tokio::io::split(TokioIo::new(up));
                let _ = tokio::io::copy(&mut r, &mut w).await;
            }
        });
        let mut resp = Response::new(ProxyBody::empty());
        *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        resp.headers_mut()
            .insert(header::UPGRADE, http::HeaderValue::from_static("echo"));
        resp.headers_mut().insert(
            header::CONNECTION,
            http::HeaderValue::from_static("upgrade"),
        );
        return resp;
    }
    match req.into_body().collect().await {
        Ok(b) => Response::new(ProxyBody::full(b.to_bytes())),
        Err(_) => {
            let mut resp = Response::new(ProxyBody::empty());
            *resp.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            resp
        }
    }
}

/// A served connection: the client end, and the drain sender that must outlive it.
fn connect(pipe: usize) -> (DuplexStream, DrainTx) {
    let (client, server) = tokio::io::duplex(pipe);
    let (tx, drain) = drain::channel();
    let cfg = ServerConfig {
        header_read_timeout: Duration::from_secs(30),
        max_header_bytes: MAX_HEAD,
        idle_timeout: Duration::from_secs(300),
        park_after: Duration::from_secs(3600),
        h2: H2Limits::default(),
        header_case: Default::default(),
    };
    tokio::spawn(async move { serve_http1(server, &cfg, drain, handler).await });
    (client, tx)
}

/// One response (status, body), or `None` at end of stream.
async fn read_response(r: &mut (impl AsyncBufReadExt + Unpin)) -> Option<(u16, Bytes)> {
    let mut line = String::new();
    r.read_line(&mut line).await.ok()?;
    let status = line.split(' ').nth(1)?.parse().ok()?;
    let mut len = 0;
    loop {
        line.clear();
        r.read_line(&mut line).await.ok()?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().ok()?;
            }
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).await.ok()?;
    Some((status, body.into()))
}

/// Every response until the server closes.
async fn responses_until_close(r: &mut (impl AsyncBufReadExt + Unpin)) -> Vec<(u16, Bytes)> {
    let all = async {
        let mut out = Vec::new();
        while let Some(resp) = read_response(r).await {
            out.push(resp);
        }
        out
    };
    tokio::time::timeout(DEADLINE, all)
        .await
        .expect("the server closes the connection")
}

async fn send_all_at_once(wire: &[u8]) -> Vec<(u16, Bytes)> {
    let (mut client, _tx) = connect(64 * 1024);
    client.write_all(wire).await.expect("write");
    responses_until_close(&mut BufReader::new(client)).await
}

fn ok(body: &'static [u8]) -> (u16, Bytes) {
    (200, Bytes::from_static(body))
}

fn status(code: u16) -> (u16, Bytes) {
    (code, Bytes::new())
}

#[tokio::test]
async fn refuses_each_ambiguous_head_on_the_first_request() {
    for (name, bad) in REFUSED {
        assert_eq!(send_all_at_once(bad).await, [status(400)], "{name}");
    }
}

#[tokio::test]
async fn refuses_each_ambiguous_head_pipelined_after_a_valid_request() {
    for (valid, answer) in [(CL_REQUEST, ok(b"hello")), (CHUNKED_REQUEST, ok(b"abcde"))] {
        for (name, bad) in REFUSED {
            let wire = [valid, bad].concat();
            let got = send_all_at_once(&wire).await;
            assert_eq!(got, [answer.clone(), status(400)], "{name}");
        }
    }
}

#[tokio::test]
async fn refuses_each_ambiguous_head_sent_after_a_keep_alive_response() {
    for (valid, answer) in [(CL_REQUEST, ok(b"hello")), (CHUNKED_REQUEST, ok(b"abcde"))] {
        for (name, bad) in REFUSED {
            let (mut client, _tx) = connect(64 * 1024);
            let (r, mut w) = tokio::io::split(&mut client);
            let mut r = BufReader::new(r);
            w.write_all(valid).await.expect("write");
            assert_eq!(read_response(&mut r).await, Some(answer.clone()), "{name}");
            w.write_all(bad).await.expect("write");
            assert_eq!(responses_until_close(&mut r).await, [status(400)], "{name}");
        }
    }
}

#[tokio::test]
async fn answers_every_valid_pipelined_request() {
    let wire = [
        CL_REQUEST,
        CHUNKED_REQUEST,
        b"\r\nGET /c HTTP/1.1\r\nHost: a\r\nX: tab\tinside\r\nContent-Length: 0\r\n\r\n",
        b"POST /d HTTP/1.0\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nhi",
        b"GET /e HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    ]
    .concat();
    let got = send_all_at_once(&wire).await;
    assert_eq!(
        got,
        [ok(b"hello"), ok(b"abcde"), ok(b""), ok(b"hi"), ok(b"")]
    );
}

#[tokio::test]
async fn tracks_a_chunked_body_arriving_one_byte_at_a_time() {
    // A one-byte pipe: every read the guard makes returns a single byte.
    let (client, _tx) = connect(1);
    let (r, mut w) = tokio::io::split(client);
    let wire = [CHUNKED_REQUEST, REFUSED[0].1].concat();
    let writer = tokio::spawn(async move {
        let _ = w.write_all(&wire).await;
        w
    });
    let got = responses_until_close(&mut BufReader::new(r)).await;
    assert_eq!(got, [ok(b"abcde"), status(400)]);
    drop(writer);
}

#[tokio::test]
async fn stops_inspecting_once_an_upgrade_switches_protocols() {
    let (client, _tx) = connect(64 * 1024);
    let (r, mut w) = tokio::io::split(client);
    let mut r = BufReader::new(r);
    // Refused if it were still read as HTTP/1: after a 101 it is the new protocol's bytes.
    let tunnelled = REFUSED[0].1;
    let wire = [
        &b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n"[..],
        tunnelled,
    ]
    .concat();
    w.write_all(&wire).await.expect("write");
    assert_eq!(read_response(&mut r).await, Some(status(101)));
    let mut echoed = vec![0; tunnelled.len()];
    tokio::time::timeout(DEADLINE, r.read_exact(&mut echoed))
        .await
        .expect("echo arrives")
        .expect("read");
    assert_eq!(echoed, tunnelled);
}

#[tokio::test]
async fn keeps_inspecting_when_an_upgrade_request_is_answered_without_switching() {
    let wire = [
        &b"GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: other\r\n\r\n"[..],
        REFUSED[0].1,
    ]
    .concat();
    assert_eq!(send_all_at_once(&wire).await, [ok(b""), status(400)]);
}

#[tokio::test]
async fn answers_431_when_the_head_exceeds_the_limit() {
    let long = [
        &b"GET / HTTP/1.1\r\nHost: a\r\nX: "[..],
        &vec![b'a'; MAX_HEAD],
        b"\r\n\r\n",
    ]
    .concat();
    assert_eq!(send_all_at_once(&long).await, [status(431)]);
    let after_valid = [CL_REQUEST, &long].concat();
    assert_eq!(
        send_all_at_once(&after_valid).await,
        [ok(b"hello"), status(431)]
    );
}

#[tokio::test]
async fn answers_431_to_more_headers_than_hyper_takes() {
    let mut many = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
    for _ in 0..super::MAX_HEADERS {
        many.extend_from_slice(b"x: y\r\n");
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(send_all_at_once(&many).await, [status(431)]);
}

#[tokio::test]
async fn never_answers_past_a_malformed_chunk() {
    let wire = [
        &b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXX"[..],
        CL_REQUEST,
    ]
    .concat();
    let got = send_all_at_once(&wire).await;
    assert!(got.iter().all(|(s, _)| *s != 200), "{got:?}");
}

#[tokio::test]
async fn refusal_is_hypers_own_400_with_connection_close() {
    let (mut client, _tx) = connect(64 * 1024);
    client
        .write_all(&[CL_REQUEST, REFUSED[0].1].concat())
        .await
        .expect("write");
    let mut raw = Vec::new();
    tokio::time::timeout(DEADLINE, client.read_to_end(&mut raw))
        .await
        .expect("the server closes the connection")
        .expect("read");
    let raw = String::from_utf8_lossy(&raw);
    let refusal = raw.split("hello").nth(1).unwrap_or_default();
    assert!(
        refusal.starts_with("HTTP/1.1 400 Bad Request\r\nconnection: close\r\n"),
        "{raw}"
    );
}

#[tokio::test]
async fn drains_what_the_client_still_sends_after_a_refusal() {
    // Far more than the pipe holds: without the drain the writer sees a broken pipe, and on
    // TCP the unread bytes would turn the close into a reset that can discard the 400.
    let (client, _tx) = connect(1024);
    let (r, mut w) = tokio::io::split(client);
    let wire = [REFUSED[0].1, &vec![b'x'; 100 * 1024]].concat();
    let writer = tokio::spawn(async move { w.write_all(&wire).await });
    let got = responses_until_close(&mut BufReader::new(r)).await;
    assert_eq!(got, [status(400)]);
    let written = tokio::time::timeout(DEADLINE, writer)
        .await
        .expect("the server keeps reading")
        .expect("writer task");
    assert!(written.is_ok(), "{written:?}");
}
