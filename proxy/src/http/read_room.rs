//! Room in a connection's read buffer for the next read, made where the last reads were.

use bytes::BytesMut;

/// Makes at least `min` bytes of room after `buf`'s contents, growing it by `grow` if there is
/// less.
///
/// An empty buffer that no split-off head or body still shares starts again at the front of its
/// allocation, where this connection's last request was read. Without that each read moved on
/// into bytes not touched for many requests, through the whole allocation: with a few hundred
/// connections, every read landed in lines gone from the CPU's cache, and pushed others out.
pub fn make(buf: &mut BytesMut, min: usize, grow: usize) {
    if buf.is_empty() {
        // Asking for more than the capacity left can only be met by reclaiming the front of the
        // allocation; the call allocates nothing and fails if the buffer is still shared.
        let _ = buf.try_reclaim(buf.capacity() + 1);
    }
    if buf.capacity() - buf.len() < min {
        buf.reserve(grow);
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
    fn a_buffer_short_of_room_grows() {
        let mut buf = BytesMut::with_capacity(64);
        buf.extend_from_slice(&[b'x'; 60]);
        make(&mut buf, 64, 1024);
        assert!(buf.capacity() - buf.len() >= 64);
        assert_eq!(&buf[..], &[b'x'; 60][..]);
    }
}
