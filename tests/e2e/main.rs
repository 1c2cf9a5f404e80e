//! The end-to-end test binary: one module per feature, all against real processes and sockets.

mod bodies;
mod grpc;
mod h2;
mod infra;
mod tcp;
mod transparent;
mod websocket;
