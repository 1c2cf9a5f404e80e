//! The field names the peers of this thread sent last, by position: keep-alive clients send
//! the same names in the same order, and so does an upstream's server software; comparing the
//! bytes with those of the name last seen at that position costs a fraction of parsing it afresh
//! (`HeaderName::from_bytes` lowercases and classifies every name: ~110 instructions each).
//!
//! One table for request heads and one for response heads, shared by every connection of the
//! worker thread, so they stay in the CPU's cache. A table per connection was cold memory with a
//! few hundred connections open: a cache miss for every name compared.

use std::cell::RefCell;

use http::header::{HeaderName, InvalidHeaderName};

thread_local! {
    static REQUESTS: RefCell<Names> = const { RefCell::new(Names::new()) };
    static RESPONSES: RefCell<Names> = const { RefCell::new(Names::new()) };
}

/// Runs `f` with this thread's table of request-head names.
pub fn of_requests<R>(f: impl FnOnce(&mut Names) -> R) -> R {
    REQUESTS.with_borrow_mut(f)
}

/// Runs `f` with this thread's table of response-head names.
pub fn of_responses<R>(f: impl FnOnce(&mut Names) -> R) -> R {
    RESPONSES.with_borrow_mut(f)
}

/// Names beyond this position are parsed every time.
const KEPT: usize = 24;

/// Names by position in the head, each with the bytes it was last sent as.
#[derive(Debug, Default)]
pub struct Names(Vec<(Box<[u8]>, HeaderName)>);

impl Names {
    /// An empty table.
    pub const fn new() -> Self {
        Names(Vec::new())
    }

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
    fn requests_and_responses_keep_their_own_table_for_the_thread() {
        let request = of_requests(|n| n.get(0, b"X-Request-Side")).expect("valid");
        let response = of_responses(|n| n.get(0, b"X-Response-Side")).expect("valid");
        assert_eq!(request.as_str(), "x-request-side");
        assert_eq!(response.as_str(), "x-response-side");
        // Each table still holds its own name at position 0, seen by a later connection.
        assert_eq!(of_requests(|n| n.0[0].1.clone()), request);
        assert_eq!(of_responses(|n| n.0[0].1.clone()), response);
        let other_thread = std::thread::spawn(|| of_requests(|n| n.0.len()));
        assert_eq!(
            other_thread.join().expect("thread"),
            0,
            "tables are per thread"
        );
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
