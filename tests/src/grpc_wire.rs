//! gRPC on the wire, by hand: length-prefixed messages and the few protobuf fields of
//! `tests/grpc/echo.proto`, so a Rust test can make raw gRPC calls over one HTTP/2 connection
//! (multiplexing, trailers-only error responses) against the Python server.

use bytes::{BufMut, Bytes, BytesMut};
use http::Request;

use crate::h2_client::{full, ReqBody};

/// The echo service's path prefix (`/<package>.<Service>`).
pub const ECHO_SERVICE: &str = "/weir.test.echo.Echo";

/// An `EchoRequest` message: `message` (field 1), `fail_code` (3), `fail_message` (4).
pub fn echo_request(message: &str, fail_code: u32, fail_message: &str) -> Bytes {
    let mut b = BytesMut::new();
    put_bytes(&mut b, 1, message.as_bytes());
    if fail_code != 0 {
        put_varint(&mut b, 3 << 3);
        put_varint(&mut b, u64::from(fail_code));
    }
    if !fail_message.is_empty() {
        put_bytes(&mut b, 4, fail_message.as_bytes());
    }
    b.freeze()
}

fn put_bytes(b: &mut BytesMut, field: u64, v: &[u8]) {
    put_varint(b, field << 3 | 2);
    put_varint(b, v.len() as u64);
    b.put_slice(v);
}

fn put_varint(b: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        b.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    b.put_u8(v as u8);
}

/// One gRPC message frame: uncompressed flag, 4-byte big-endian length, the message.
pub fn frame(msg: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + msg.len());
    b.put_u8(0);
    b.put_u32(u32::try_from(msg.len()).expect("message under 4 GiB"));
    b.put_slice(msg);
    b.freeze()
}

/// A unary call `POST http://{authority}{ECHO_SERVICE}/{method}` carrying one message.
pub fn unary_request(authority: &str, method: &str, msg: &[u8]) -> Request<ReqBody> {
    Request::post(format!("http://{authority}{ECHO_SERVICE}/{method}"))
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers")
        .body(full(frame(msg)))
        .expect("a valid gRPC request")
}

/// Splits a response body into its messages; `Err` when the framing is broken.
pub fn messages(mut body: &[u8]) -> Result<Vec<Bytes>, String> {
    let mut out = Vec::new();
    while !body.is_empty() {
        if body.len() < 5 {
            return Err(format!("truncated frame header: {body:?}"));
        }
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        let rest = &body[5..];
        if rest.len() < len {
            return Err(format!("frame of {len} bytes, {} left", rest.len()));
        }
        out.push(Bytes::copy_from_slice(&rest[..len]));
        body = &rest[len..];
    }
    Ok(out)
}

/// The first length-delimited field `field` of a protobuf message, as a string.
pub fn string_field(mut msg: &[u8], field: u64) -> Option<String> {
    while !msg.is_empty() {
        let key = varint(&mut msg)?;
        match key & 7 {
            0 => {
                varint(&mut msg)?;
            }
            1 => msg = msg.get(8..)?,
            2 => {
                let len = usize::try_from(varint(&mut msg)?).ok()?;
                let v = msg.get(..len)?;
                if key >> 3 == field {
                    return Some(String::from_utf8_lossy(v).into_owned());
                }
                msg = &msg[len..];
            }
            5 => msg = msg.get(4..)?,
            _ => return None,
        }
    }
    None
}

fn varint(msg: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = msg.split_first()?;
        *msg = rest;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_encoded_request_decodes_back_and_frames_split() {
        let msg = echo_request(&"x".repeat(200), 5, "nope");
        assert_eq!(string_field(&msg, 1).as_deref(), Some(&*"x".repeat(200)));
        assert_eq!(string_field(&msg, 4).as_deref(), Some("nope"));
        let mut body = frame(&msg).to_vec();
        body.extend_from_slice(&frame(b""));
        assert_eq!(messages(&body), Ok(vec![msg, Bytes::new()]));
        assert!(messages(&body[..7]).is_err());
    }
}
