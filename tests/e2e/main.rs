//! The end-to-end test binary: one module per feature, all against real processes and sockets.

mod gateway;
mod infra;
mod registry;
