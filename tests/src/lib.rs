//! Shared helpers for the end-to-end tests: real processes (weir-proxy, nginx, Python grpcio,
//! websockets and h2), real sockets, network namespaces. The tests themselves live in `e2e/`, one module per feature.

pub mod backend;
pub mod control;
pub mod fanout;
pub mod grpc;
pub mod grpc_wire;
pub mod h2_client;
pub mod h2raw;
pub mod h2script;
pub mod http_client;
pub mod metrics;
pub mod netns;
pub mod nginx;
pub mod pattern;
pub mod ports;
pub mod process;
pub mod proxy;
pub mod raw_http1;
pub mod recorder;
pub mod registry;
pub mod sidecar;
pub mod skip;
pub mod tmp;
pub mod wait;
pub mod ws;

pub use backend::TestBackend;
pub use grpc::GrpcServer;
pub use http_client::Reply;
pub use netns::NetNs;
pub use nginx::Nginx;
pub use ports::{free_addr, free_port};
pub use proxy::WeirProxy;
pub use wait::{poll_until, wait_for_port};
