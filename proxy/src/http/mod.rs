//! HTTP on both sides of the proxy: bodies, header hygiene, the server and the upstream pool.

pub mod body;
pub mod ext_connect;
pub mod front;
pub mod h1;
pub mod head_guard;
pub mod headers;
pub mod host;
pub mod park;
pub mod pool;
#[cfg(any(test, fuzzing))]
pub mod props;
pub mod read_room;
pub mod request_id;
pub mod scratch;
pub mod server;
pub mod spare_maps;
pub mod trailers;
