//! weir-proxy: the per-pod sidecar and edge gateway. `App::build(config)` is shared by `main.rs`
//! and the tests.

pub mod addr;
pub mod balance;
pub mod model;
