//! Room in a connection's read buffer for the next read, and the spare buffers a worker thread
//! lends to connections between messages.

use std::cell::RefCell;

use bytes::BytesMut;

/// Spare read buffers kept per worker thread: enough for the bursts of connections that finish a
/// message between two reads of a new one, no more (each is 8–16 KiB of resident memory).
const SPARES: usize = 32;
/// Larger buffers (grown for a long head or body) are not kept.
const KEEP_AT_MOST: usize = 64 * 1024;

thread_local! {
    static SPARE: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

/// Makes at least `min` bytes of room after `buf`'s contents, growing it by `grow` if there is
/// less. A connection without a buffer borrows the one given back last on this thread.
///
/// An empty buffer that no split-off head or body still shares starts again at the front of its
/// allocation, where this connection's last request was read. Without that each read moved on
/// into bytes not touched for many requests, through the whole allocation: with a few hundred
/// connections, every read landed in lines gone from the CPU's cache, and pushed others out.
pub fn make(buf: &mut BytesMut, min: usize, grow: usize) {
    if buf.capacity() == 0 {
        *buf = SPARE
            .with_borrow_mut(Vec::pop)
            .unwrap_or_else(|| BytesMut::with_capacity(grow));
    }
    if buf.is_empty() {
        // Asking for more than the capacity left can only be met by reclaiming the front of the
        // allocation; the call allocates nothing and fails if the buffer is still shared.
        let _ = buf.try_reclaim(buf.capacity() + 1);
    }
    if buf.capacity() - buf.len() < min {
        buf.reserve(grow);
    }
}

/// Ends a front connection's hold on `buf` once a request is read and answered, if nothing of the
/// next one is in it: the buffer goes to the thread's spares when nothing else shares it (else it is
/// freed with the last body or head that does), and `buf` is left without one.
///
/// The next read on any connection of this thread then lands in memory the last message was
/// read into, still in the CPU's cache, rather than in this connection's own buffer, untouched
/// since its previous request (nginx frees and reallocates its header buffer per request for
/// the same reason). An idle connection holds no read buffer at all.
///
/// An upstream connection keeps its buffer: when it comes home the response's head and body
/// still share the buffer, which would be freed with them rather than given back (a fresh
/// 16 KiB allocation per request cost ~400 instructions, more than the warm reads saved).
pub fn give_back(buf: &mut BytesMut) {
    if !buf.is_empty() || buf.capacity() == 0 {
        return;
    }
    let mut spare = std::mem::take(buf);
    // Succeeds only for a buffer nothing shares, moved to the front of its allocation; a message
    // was split off it, so its view no longer starts there. One that does is let go: a rare
    // missed reuse.
    if spare.try_reclaim(spare.capacity() + 1) && spare.capacity() <= KEEP_AT_MOST {
        SPARE.with_borrow_mut(|s| {
            if s.len() < SPARES {
                s.push(spare);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_unshared_buffer_is_read_into_from_the_front_again() {
        let mut buf = BytesMut::with_capacity(1024);
        let front = buf.as_ptr();
        buf.extend_from_slice(&[b'x'; 100]);
        drop(buf.split_to(100).freeze());
        assert_ne!(buf.as_ptr(), front, "split_to moved the start on");
        make(&mut buf, 64, 1024);
        assert_eq!(buf.as_ptr(), front);
        assert_eq!(buf.capacity(), 1024);
    }

    #[test]
    fn a_buffer_still_shared_or_not_empty_stays_where_it_is() {
        let mut buf = BytesMut::with_capacity(1024);
        buf.extend_from_slice(&[b'x'; 100]);
        let head = buf.split_to(60).freeze();
        let at = buf.as_ptr();
        make(&mut buf, 64, 1024);
        assert_eq!(buf.as_ptr(), at, "40 unread bytes stay put");
        drop(buf.split_to(40));
        let at = buf.as_ptr();
        make(&mut buf, 64, 1024);
        assert_eq!(buf.as_ptr(), at, "the head still shares the allocation");
        assert_eq!(&head[..], &[b'x'; 60][..]);
    }

    #[test]
    fn a_buffer_given_back_is_the_next_lent_whole_and_empty() {
        SPARE.with_borrow_mut(Vec::clear);
        let mut buf = BytesMut::new();
        make(&mut buf, 64, 1024);
        let front = buf.as_ptr();
        buf.extend_from_slice(&[b'x'; 100]);
        drop(buf.split_to(100).freeze());
        give_back(&mut buf);
        assert_eq!(buf.capacity(), 0, "the connection no longer holds it");
        let mut next = BytesMut::new();
        make(&mut next, 64, 4096);
        assert_eq!(next.as_ptr(), front);
        assert_eq!((next.len(), next.capacity()), (0, 1024));
        SPARE.with_borrow_mut(Vec::clear);
    }

    #[test]
    fn a_buffer_still_shared_or_holding_the_next_message_is_not_kept() {
        SPARE.with_borrow_mut(Vec::clear);
        let mut buf = BytesMut::with_capacity(1024);
        buf.extend_from_slice(b"GET / HTTP/1.1\r\n\r\nGET");
        let head = buf.split_to(18).freeze();
        give_back(&mut buf);
        assert_eq!(
            &buf[..],
            b"GET",
            "the next request's bytes stay with the connection"
        );
        drop(buf.split_to(3));
        give_back(&mut buf);
        assert_eq!(buf.capacity(), 0);
        assert_eq!(SPARE.with_borrow(Vec::len), 0, "the head still shares it");
        assert_eq!(&head[..], b"GET / HTTP/1.1\r\n\r\n");
    }

    #[test]
    fn the_thread_keeps_a_bounded_number_of_spares() {
        SPARE.with_borrow_mut(Vec::clear);
        for _ in 0..SPARES + 5 {
            let mut buf = BytesMut::with_capacity(1024);
            buf.extend_from_slice(b"x");
            drop(buf.split_to(1));
            give_back(&mut buf);
        }
        assert_eq!(SPARE.with_borrow(Vec::len), SPARES);
        let mut big = BytesMut::with_capacity(KEEP_AT_MOST + 1);
        big.extend_from_slice(b"x");
        drop(big.split_to(1));
        SPARE.with_borrow_mut(Vec::clear);
        give_back(&mut big);
        assert_eq!(SPARE.with_borrow(Vec::len), 0, "a grown buffer is freed");
    }

    #[test]
    fn a_buffer_short_of_room_grows() {
        let mut buf = BytesMut::with_capacity(64);
        buf.extend_from_slice(&[b'x'; 60]);
        make(&mut buf, 64, 1024);
        assert!(buf.capacity() - buf.len() >= 64);
        assert_eq!(&buf[..], &[b'x'; 60][..]);
    }
}
