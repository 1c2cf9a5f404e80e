//! The end-to-end test binary: one module per feature, all against real processes and sockets.

mod admin;
mod bad_input;
mod bodies;
mod breaker;
mod control;
mod gateway;
mod grpc;
mod grpc_mesh;
mod h2;
mod h2_abuse;
mod infra;
mod lifecycle;
mod rate_limit;
mod registry;
mod resilience;
mod resilience_weirctl;
mod retries;
mod shaping;
mod shaping_faults;
mod shaping_grpc;
mod tcp;
mod timeouts;
mod transparent;
mod websocket;
mod weirctl;
