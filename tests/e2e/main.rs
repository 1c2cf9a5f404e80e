//! The end-to-end test binary: one module per feature, all against real processes and sockets.

mod bad_input;
mod h2_abuse;
mod infra;
