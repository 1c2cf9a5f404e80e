//! `X-Request-Id` (`WEIR_PROXY_REQUEST_ID=generate`): a request that arrives without one gets a
//! random UUID, so the access logs and the applications of every hop can name the same request.

use std::str::FromStr;

use http::{HeaderMap, HeaderName, HeaderValue};

/// The field's name.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Whether the proxy makes up request IDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RequestId {
    /// Requests go on with whatever they carry (the default).
    #[default]
    Off,
    /// A request without `X-Request-Id` gets one; one it carries is kept.
    Generate,
}

impl FromStr for RequestId {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "off" => Ok(Self::Off),
            "generate" => Ok(Self::Generate),
            _ => Err("expected off or generate".into()),
        }
    }
}

impl RequestId {
    /// Adds an ID to `headers` if this is `Generate` and they carry none.
    #[inline]
    pub fn ensure(self, headers: &mut HeaderMap) {
        if self == RequestId::Generate && !headers.contains_key(X_REQUEST_ID) {
            headers.insert(X_REQUEST_ID, new_id(rand::random()));
        }
    }
}

/// A version 4 (random) UUID from `bits`, in its 36-character lower-case form.
fn new_id(bits: u128) -> HeaderValue {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // RFC 9562 §5.4: version 4 in bits 48-51, variant 0b10 in bits 64-65.
    let v = (bits & !(0xf << 76) & !(0x3 << 62)) | (0x4 << 76) | (0x2 << 62);
    let mut out = [0u8; 36];
    let mut nibble = 32;
    for (i, slot) in out.iter_mut().enumerate() {
        if matches!(i, 8 | 13 | 18 | 23) {
            *slot = b'-';
        } else {
            nibble -= 1;
            *slot = HEX[((v >> (nibble * 4)) & 0xf) as usize];
        }
    }
    HeaderValue::from_bytes(&out).unwrap_or_else(|_| HeaderValue::from_static(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_version_4_uuids_from_their_bits() {
        let id = new_id(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        assert_eq!(id, "01234567-89ab-4def-8123-456789abcdef");
        let ones = new_id(u128::MAX);
        assert_eq!(ones, "ffffffff-ffff-4fff-bfff-ffffffffffff");
        assert_eq!(new_id(0), "00000000-0000-4000-8000-000000000000");
    }

    #[test]
    fn only_generate_adds_one_and_never_over_the_requests_own() {
        let mut h = HeaderMap::new();
        RequestId::Off.ensure(&mut h);
        assert!(h.is_empty());
        RequestId::Generate.ensure(&mut h);
        let made = h[X_REQUEST_ID].clone();
        assert_eq!(made.len(), 36);
        RequestId::Generate.ensure(&mut h);
        assert_eq!(h[X_REQUEST_ID], made);
        let mut other = HeaderMap::new();
        RequestId::Generate.ensure(&mut other);
        assert_ne!(other[X_REQUEST_ID], made);
        assert_eq!("Generate".parse(), Ok(RequestId::Generate));
        assert!("uuid".parse::<RequestId>().is_err());
    }
}
