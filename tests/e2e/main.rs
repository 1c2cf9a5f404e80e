//! The end-to-end test binary: one module per feature, all against real processes and sockets.

mod admin;
mod bad_input;
mod bodies;
mod control;
mod gateway;
mod grpc;
mod grpc_mesh;
mod h2;
mod h2_abuse;
mod infra;
mod lifecycle;
mod registry;
mod shaping;
mod shaping_faults;
mod shaping_grpc;
mod tcp;
mod transparent;
mod websocket;
mod weirctl;
