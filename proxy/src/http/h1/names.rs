//! The field names a connection's peer sent last, by position: a keep-alive peer sends the
//! same names in the same order, and comparing the bytes with those of the name last seen there
//! costs a fraction of parsing it afresh (`HeaderName::from_bytes` lowercases and classifies
//! every name: ~110 instructions each).

use http::header::{HeaderName, InvalidHeaderName};

/// Names beyond this position are parsed every time.
const KEPT: usize = 24;

/// One connection's names, by position in the head, each with the bytes it was sent as.
#[derive(Debug, Default)]
pub struct Names(Vec<(Box<[u8]>, HeaderName)>);

impl Names {
    /// The name `raw` at position `i` of a head.
    pub fn get(&mut self, i: usize, raw: &[u8]) -> Result<HeaderName, InvalidHeaderName> {
        if let Some((sent, name)) = self.0.get(i) {
            if **sent == *raw {
                return Ok(name.clone());
            }
        }
        let name = HeaderName::from_bytes(raw)?;
        let kept = (raw.into(), name.clone());
        if let Some(slot) = self.0.get_mut(i) {
            *slot = kept;
        } else if i == self.0.len() && i < KEPT {
            self.0.push(kept);
        }
        Ok(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_seen_again_is_the_same_name_and_a_new_one_replaces_it() {
        let mut names = Names::default();
        let a = names.get(0, b"Content-Type").expect("valid");
        assert_eq!(a, http::header::CONTENT_TYPE);
        assert_eq!(names.get(0, b"content-TYPE").expect("valid"), a);
        let custom = names.get(1, b"X-Trace").expect("valid");
        assert_eq!(custom.as_str(), "x-trace");
        assert_eq!(
            names.get(0, b"Server").expect("valid"),
            http::header::SERVER
        );
        assert_eq!(
            names.get(0, b"server").expect("valid"),
            http::header::SERVER
        );
        assert_eq!(names.get(1, b"X-Trace").expect("valid").as_str(), "x-trace");
    }

    #[test]
    fn an_invalid_name_is_refused_even_where_a_valid_one_was_kept() {
        let mut names = Names::default();
        names.get(0, b"host").expect("valid");
        assert!(names.get(0, b"ho st").is_err());
        assert!(names.get(0, b"").is_err());
        assert_eq!(names.get(0, b"HOST").expect("valid"), http::header::HOST);
    }

    #[test]
    fn positions_past_the_kept_ones_still_parse() {
        let mut names = Names::default();
        for i in 0..KEPT + 5 {
            let raw = format!("x-field-{i}");
            assert_eq!(names.get(i, raw.as_bytes()).expect("valid").as_str(), raw);
        }
        assert_eq!(names.0.len(), KEPT);
    }
}
