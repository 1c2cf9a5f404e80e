//! Header maps given back once their head is encoded, lent to the next head the thread decodes.
//!
//! A `HeaderMap` is two allocations (its index table and its entries), so a proxied request and
//! its response cost four allocations and four frees, ~400 instructions of a request's ~14k
//! (callgrind). A head is decoded and encoded again in the same poll of its task in the common
//! case, so the map given back is the next one taken, still in the CPU's cache.

use std::cell::RefCell;

use http::HeaderMap;

/// Maps kept per thread: heads decoded while others wait to be encoded take fresh maps.
const KEEP: usize = 16;
/// Maps with room for more fields than this are not kept: a rare big head should not stay
/// resident.
const KEEP_CAPACITY: usize = 48;

thread_local! {
    static SPARE: RefCell<Vec<HeaderMap>> = const { RefCell::new(Vec::new()) };
}

/// An empty map with room for at least `capacity` fields.
pub fn take(capacity: usize) -> HeaderMap {
    match SPARE.with_borrow_mut(Vec::pop) {
        Some(mut map) => {
            if map.capacity() < capacity {
                map.reserve(capacity);
            }
            map
        }
        None => HeaderMap::with_capacity(capacity),
    }
}

/// Empties `map` and keeps it for the next [`take`] on this thread.
pub fn give_back(mut map: HeaderMap) {
    if map.capacity() > KEEP_CAPACITY {
        return;
    }
    map.clear();
    SPARE.with_borrow_mut(|spare| {
        if spare.len() < KEEP {
            spare.push(map);
        }
    });
}

#[cfg(test)]
mod tests {
    use http::header::{HOST, USER_AGENT};

    use super::*;

    #[test]
    fn a_map_given_back_comes_back_empty_with_its_room() {
        let mut map = take(4);
        map.insert(HOST, "a".parse().expect("value"));
        map.append(USER_AGENT, "b".parse().expect("value"));
        let room = map.capacity();
        give_back(map);
        let again = take(2);
        assert!(again.is_empty());
        assert_eq!(again.capacity(), room);
        assert_eq!(again.get(HOST), None);
    }

    #[test]
    fn a_map_taken_has_the_room_asked_for() {
        give_back(HeaderMap::with_capacity(2));
        assert!(take(30).capacity() >= 30);
        assert!(take(3).capacity() >= 3);
    }

    #[test]
    fn a_large_map_is_not_kept_and_the_spares_are_bounded() {
        // This test's thread starts with no spares.
        give_back(HeaderMap::with_capacity(KEEP_CAPACITY * 2));
        assert_eq!(SPARE.with_borrow(Vec::len), 0);
        for _ in 0..KEEP + 5 {
            give_back(HeaderMap::with_capacity(4));
        }
        assert_eq!(SPARE.with_borrow(Vec::len), KEEP);
    }
}
