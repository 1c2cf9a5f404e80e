//! weir-control: the registry (a file by default) kept in one in-memory store and streamed to
//! every proxy over gRPC, plus the admin API `weirctl` speaks. Watch → index → translate → stream.

pub mod admin_http;
pub mod api;
pub mod cli;
pub mod index;
pub mod metrics;
pub mod observe;
pub mod persist;
pub mod proxies;
pub mod server;
pub mod sources;
pub mod state;
