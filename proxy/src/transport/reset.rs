//! A second handle on a connection's socket, so that a splice outliving the connection's own IO
//! objects (an upgrade hyper hands over as `Upgraded`) can still make its close a reset
//! (SO_LINGER 0) when the other side failed, as the opaque TCP relay does.

use std::{
    io,
    os::fd::{AsFd, BorrowedFd, RawFd},
    sync::Arc,
    time::Duration,
};

/// A duplicate of a socket's descriptor (shared by its clones: a request's extensions must be
/// `Clone`). The socket closes when the last descriptor does, so drop this after the IO objects
/// it shadows: then the close is a FIN, or a reset after [`ResetHandle::reset_on_close`].
#[derive(Debug, Clone)]
pub struct ResetHandle(Arc<socket2::Socket>);

impl ResetHandle {
    /// A handle on `socket` (one `fcntl(F_DUPFD_CLOEXEC)`).
    pub fn of(socket: &impl AsFd) -> io::Result<Self> {
        Ok(Self(Arc::new(socket.as_fd().try_clone_to_owned()?.into())))
    }

    /// A handle on the socket of descriptor `fd`.
    ///
    /// # Safety
    /// `fd` must be open, and be the socket meant, for the whole call: pass the descriptor of
    /// the connection a request arrived on, while that request's handler runs on it.
    #[allow(unsafe_code)]
    pub unsafe fn of_raw(fd: RawFd) -> io::Result<Self> {
        // SAFETY: the caller keeps `fd` open for the call; the borrow ends with it.
        Self::of(&unsafe { BorrowedFd::borrow_raw(fd) })
    }

    /// Makes the socket's final close send RST instead of FIN (never blocks the close).
    pub fn reset_on_close(&self) {
        let _ = self.0.set_linger(Some(Duration::ZERO));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{ErrorKind, Read};
    use std::net::{TcpListener, TcpStream};

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let c = TcpStream::connect(l.local_addr().expect("bound")).expect("connect");
        let (s, _) = l.accept().expect("accept");
        (c, s)
    }

    #[test]
    fn the_close_is_a_fin_unless_asked_for_a_reset_and_waits_for_the_handle() {
        let (mut client, server) = pair();
        let handle = ResetHandle::of(&server).expect("dup");
        drop(server);
        let mut buf = [0u8; 8];
        client.set_nonblocking(true).expect("nonblocking");
        let open = client
            .read(&mut buf)
            .expect_err("no end yet: the handle holds the socket");
        assert_eq!(open.kind(), ErrorKind::WouldBlock);
        client.set_nonblocking(false).expect("blocking");
        drop(handle);
        assert_eq!(client.read(&mut buf).expect("a clean end"), 0);

        let (mut client, server) = pair();
        let handle = ResetHandle::of(&server).expect("dup");
        drop(server);
        handle.reset_on_close();
        drop(handle);
        let e = client.read(&mut buf).expect_err("a reset");
        assert_eq!(e.kind(), ErrorKind::ConnectionReset);
    }
}
