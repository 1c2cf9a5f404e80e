//! Where a redirected connection was headed: `SO_ORIGINAL_DST` behind a trait, so tests can pass
//! a fixed address.

use std::{io, net::SocketAddr};

use socket2::SockRef;
use tokio::net::TcpStream;

use crate::addr::OrigDstAddr;

/// Reads the original destination of an accepted connection.
pub trait OrigDst: Send + Sync + 'static {
    /// The address the client dialled before iptables redirected it.
    fn orig_dst(&self, stream: &TcpStream) -> io::Result<OrigDstAddr>;
}

/// Production: the kernel's record of the pre-NAT destination.
pub struct SoOriginalDst;

impl OrigDst for SoOriginalDst {
    fn orig_dst(&self, stream: &TcpStream) -> io::Result<OrigDstAddr> {
        let sock = SockRef::from(stream);
        let addr = match stream.local_addr()? {
            SocketAddr::V4(_) => sock.original_dst()?,
            SocketAddr::V6(_) => sock.original_dst_ipv6()?,
        };
        addr.as_socket().map(OrigDstAddr).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "original destination is not an IP address",
            )
        })
    }
}

/// Tests: every connection "was headed" to one address.
pub struct Fixed(pub SocketAddr);

impl OrigDst for Fixed {
    fn orig_dst(&self, _: &TcpStream) -> io::Result<OrigDstAddr> {
        Ok(OrigDstAddr(self.0))
    }
}
