//! One type per kind of address, so the compiler stops `connect(client_addr)`.

use std::{fmt, net::SocketAddr};

macro_rules! addr_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub SocketAddr);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

addr_type!(
    /// The downstream peer of an accepted connection.
    ClientAddr
);
addr_type!(
    /// Where the client meant to go, as `SO_ORIGINAL_DST` reports it.
    OrigDstAddr
);
addr_type!(
    /// An upstream endpoint the balancer may pick.
    EndpointAddr
);
addr_type!(
    /// The local address a listener is bound to.
    ListenAddr
);
