//! The end-to-end test binary: one module per feature, all against real processes and sockets.

mod admin;
mod gateway;
mod infra;
mod lifecycle;
mod registry;
