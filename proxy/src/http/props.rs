//! Properties weir's HTTP/1 handling keeps for any input: the hand-written framing code for any
//! read boundaries (here), the whole downstream server and the upstream client over loopback
//! sockets (`stream.rs`, `upstream.rs`). Checked on seeded random input by the unit tests
//! (`props/tests.rs`) and with coverage guidance by `cargo fuzz` (`proxy/fuzz`). Each function
//! panics where a property fails.

use bytes::{Bytes, BytesMut};
use http::HeaderValue;

use crate::http::{
    front::request,
    h1::{chunked, decode, encode, names::Names},
    head_guard::{body, head},
};

/// The ends of the reads `len` bytes arrive in, 1 to 16 bytes each as `seed` picks them (up to
/// 1/64 of `len` for long input): a parser fed `data[..end]` for each end in turn must decide as
/// it does fed all of `data`.
fn read_ends(seed: u8, len: usize) -> Vec<usize> {
    let most = (len / 64).max(16) as u32;
    let mut x = u32::from(seed).wrapping_mul(0x9E37_79B9) | 1;
    let mut ends = Vec::new();
    let mut at = 0;
    while at < len {
        // xorshift32: a different split for every seed, the same every run.
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        at = (at + 1 + (x % most) as usize).min(len);
        ends.push(at);
    }
    ends
}

/// A runtime for one thread's loopback exchanges, made once per thread (a fuzzer calls a
/// property many times a second).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// `data` for a failure message: escaped, and cut short.
fn show(data: &[u8]) -> String {
    let s = data.escape_ascii().to_string();
    match s.char_indices().nth(300) {
        Some((i, _)) => format!("{}… ({} bytes)", &s[..i], data.len()),
        None => s,
    }
}

/// A request head as the guard reads it: `HeadScan` decides the same whatever the reads; its
/// word-at-a-time skip agrees with a byte-by-byte one; the fast path takes no head `validate`
/// refuses, and a head it takes has the framing the guard found, valid field values, and goes
/// upstream as a head the guard would accept again, with the same method and fields.
pub fn request_head(seed: u8, data: &[u8]) {
    for i in 0..=data.len() {
        let naive = (i..data.len())
            .find(|&j| data[j] < 0x20 || data[j] == 0x7f)
            .unwrap_or(data.len());
        assert_eq!(head::skip_plain(data, i), naive, "skip_plain from {i}");
    }
    let whole = head::HeadScan::default().feed(data);
    let mut scan = head::HeadScan::default();
    let mut split = Ok(None);
    for end in read_ends(seed, data.len()) {
        split = scan.feed(&data[..end]);
        if split != Ok(None) {
            break;
        }
    }
    assert_eq!(whole, split, "HeadScan whole and in reads: {}", show(data));
    let Ok(Some(end)) = whole else { return };
    let head = Bytes::copy_from_slice(&data[..end]);
    // The fast path runs `HeadScan` but not `validate`: what the guard refuses, it leaves to the
    // guard.
    let taken = request::read(&head, &mut Names::default());
    let verdict = match head::validate(&head) {
        Ok(v) => v,
        Err(r) => {
            assert!(
                taken.is_none(),
                "the fast path took a head the guard refuses ({r:?}): {}",
                show(&head)
            );
            return;
        }
    };
    let Some((plan, parts)) = taken else {
        return;
    };
    match verdict.framing {
        head::Framing::None => assert_eq!(plan.body, 0, "no body"),
        head::Framing::Length(n) => assert_eq!(plan.body, n, "Content-Length"),
        head::Framing::Chunked => panic!("the fast path took a chunked request"),
    }
    assert!(
        !verdict.may_switch,
        "the fast path took a CONNECT or an upgrade"
    );
    for v in parts.headers.values() {
        assert!(
            HeaderValue::from_bytes(v.as_bytes()).is_ok(),
            "field value {v:?}"
        );
    }
    let mut out = Vec::new();
    encode::head(
        &parts,
        plan.body == 0,
        Some(plan.body),
        Default::default(),
        &mut out,
    );
    let sent = head::HeadScan::default().feed(&out);
    assert_eq!(
        sent,
        Ok(Some(out.len())),
        "upstream head {:?}",
        String::from_utf8_lossy(&out)
    );
    assert!(
        head::validate(&out).is_ok(),
        "upstream head {:?}",
        String::from_utf8_lossy(&out)
    );
    let mut fields = [httparse::EMPTY_HEADER; decode::MAX_HEADERS + 1];
    let mut again = httparse::Request::new(&mut fields);
    assert!(again.parse(&out).is_ok_and(|s| s.is_complete()));
    assert_eq!(again.method, Some(parts.method.as_str()));
    let sent: Vec<(String, &[u8])> = again
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), h.value))
        .collect();
    let kept: Vec<(String, &[u8])> = parts
        .headers
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes()))
        .collect();
    assert_eq!(sent, kept, "fields sent upstream");
}

/// A response head read from an upstream: the same head (or the same error), the same fields and
/// the same bytes left over whatever the reads; field values valid; no body where none may be.
pub fn response_head(seed: u8, data: &[u8]) {
    response_head_in(seed & 0x80 != 0, data, &read_ends(seed, data.len()));
}

/// [`response_head`] with the reads ending at `ends`.
fn response_head_in(head_request: bool, data: &[u8], ends: &[usize]) {
    let mut names = Names::default();
    let mut whole_buf = BytesMut::from(data);
    let whole = decode::response(&mut whole_buf, head_request, &mut names);
    let mut buf = BytesMut::new();
    let mut split = Ok(None);
    let mut taken = 0;
    for &end in ends {
        buf.extend_from_slice(&data[taken..end]);
        taken = end;
        split = decode::response(&mut buf, head_request, &mut names);
        if !matches!(split, Ok(None)) {
            break;
        }
    }
    buf.extend_from_slice(&data[taken..]);
    match (whole, split) {
        (Ok(Some(a)), Ok(Some(b))) => {
            assert_eq!(
                (a.status, a.version, a.framing, a.keep_alive),
                (b.status, b.version, b.framing, b.keep_alive)
            );
            assert_eq!(a.headers, b.headers);
            for v in a.headers.values() {
                assert!(
                    HeaderValue::from_bytes(v.as_bytes()).is_ok(),
                    "field value {v:?}"
                );
            }
            let bodiless = head_request || matches!(a.status.as_u16(), 204 | 304);
            if bodiless {
                assert_eq!(a.framing, decode::BodyFraming::Empty);
            }
            assert_eq!(whole_buf, buf, "bytes left after the head");
        }
        (Ok(None), Ok(None)) => assert_eq!(whole_buf, buf, "bytes left before a head"),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        (a, b) => panic!(
            "whole {}, in reads {}: {}",
            outcome(&a),
            outcome(&b),
            show(data)
        ),
    }
}

fn outcome(r: &Result<Option<decode::Head>, crate::http::h1::Error>) -> String {
    match r {
        Ok(Some(h)) => format!("{} {:?}", h.status, h.framing),
        Ok(None) => "incomplete".into(),
        Err(e) => e.to_string(),
    }
}

/// How a chunked body decoded: its data, its trailers, how it ended (or the error), and how many
/// bytes it took.
#[derive(Debug, PartialEq)]
struct Decoded {
    data: Vec<u8>,
    trailers: Option<http::HeaderMap>,
    outcome: Result<bool, String>,
    used: usize,
}

fn decode_chunked(data: &[u8], ends: &[usize]) -> Decoded {
    let mut d = chunked::Chunked::default();
    let mut out = Decoded {
        data: Vec::new(),
        trailers: None,
        outcome: Ok(false),
        used: 0,
    };
    let mut buf = BytesMut::new();
    let mut taken = 0;
    'reads: for &end in ends {
        buf.extend_from_slice(&data[taken..end]);
        taken = end;
        loop {
            let before = buf.len();
            let step = d.step(&mut buf);
            out.used += before - buf.len();
            match step {
                Ok(chunked::Step::Data(b)) => out.data.extend_from_slice(&b),
                Ok(chunked::Step::More) => break,
                Ok(chunked::Step::Trailers(t)) => {
                    out.trailers = Some(t);
                    out.outcome = Ok(true);
                    break 'reads;
                }
                Ok(chunked::Step::End) => {
                    out.outcome = Ok(true);
                    break 'reads;
                }
                Err(e) => {
                    out.outcome = Err(e.to_string());
                    break 'reads;
                }
            }
        }
    }
    out
}

/// Where the guard's tracker says a chunked request body ends (`Ok(None)`: not yet).
fn track_chunked(data: &[u8], ends: &[usize]) -> Result<Option<usize>, head::Reject> {
    let mut b = body::Body::Chunked(body::Chunked::new(64 * 1024));
    let mut taken = 0;
    for &end in ends {
        let (n, done) = b.advance(&data[taken..end])?;
        if done {
            return Ok(Some(taken + n));
        }
        assert_eq!(n, end - taken, "an unfinished body takes every byte");
        taken = end;
    }
    Ok(None)
}

/// A chunked body: the upstream decoder and the guard's tracker each decide the same whatever the
/// reads, and where the decoder finds a complete body the tracker finds it end at the same byte.
pub fn chunked_body(seed: u8, data: &[u8]) {
    chunked_body_in(data, &read_ends(seed, data.len()));
}

/// [`chunked_body`] with the reads ending at `ends`.
fn chunked_body_in(data: &[u8], ends: &[usize]) {
    let once = [data.len()];
    let whole = decode_chunked(data, &once);
    let split = decode_chunked(data, ends);
    assert!(
        whole == split,
        "decoder whole {:?}, in reads {:?}: {}",
        (&whole.outcome, whole.used),
        (&split.outcome, split.used),
        show(data)
    );
    let tracked = track_chunked(data, &once);
    assert_eq!(
        tracked,
        track_chunked(data, ends),
        "tracker whole and in reads: {}",
        show(data)
    );
    if whole.outcome == Ok(true) {
        assert_eq!(
            tracked,
            Ok(Some(whole.used)),
            "tracker against decoder: {}",
            show(data)
        );
    }
}

mod requests;
mod stream;
#[cfg(test)]
mod tests;
mod upstream;

pub use stream::downstream_bytes;
pub use upstream::upstream_bytes;
#[cfg(test)]
pub(crate) use upstream::Slot;
