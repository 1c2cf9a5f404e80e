//! Sockets: listeners, the original destination, protocol detection, replay of peeked bytes.

pub mod detect;
pub mod listen;
pub mod orig_dst;
pub mod prefixed;
pub mod reset;
pub mod tap;
