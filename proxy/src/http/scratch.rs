//! One write buffer per worker thread, lent to whichever connection is writing a response head.
//!
//! A buffer per connection is cold memory with a few hundred connections open: every response
//! head written into it missed the CPU's cache. The thread's buffer was written by the response
//! before, so it is warm. A head is written and sent without waiting in the common case, so the
//! next connection finds the buffer back; one that must wait for the socket keeps it, and a
//! connection that finds none meanwhile starts an empty one (the last returned is kept).

use std::cell::Cell;

/// Larger buffers are not kept: a rare big head or inline body should not stay resident.
const KEEP_AT_MOST: usize = 64 * 1024;

thread_local! {
    static SPARE: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// The thread's buffer, empty (or a new one if it is lent out).
pub fn take() -> Vec<u8> {
    let mut buf = SPARE.take();
    buf.clear();
    buf
}

/// Returns a buffer for the next writer.
pub fn give_back(buf: Vec<u8>) {
    if buf.capacity() <= KEEP_AT_MOST {
        SPARE.set(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffer_returned_is_the_one_lent_next_and_comes_back_empty() {
        let mut a = take();
        a.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        let at = a.as_ptr();
        give_back(a);
        let b = take();
        assert_eq!(b.as_ptr(), at);
        assert!(b.is_empty());
        // Lent out: the next writer starts its own.
        let c = take();
        assert_eq!(c.capacity(), 0);
        give_back(b);
        give_back(c);
    }

    #[test]
    fn a_large_buffer_is_not_kept() {
        give_back(Vec::with_capacity(KEEP_AT_MOST + 1));
        assert_eq!(take().capacity(), 0);
    }
}
