//! weir-proxy: the per-pod sidecar and edge gateway. `App::build(config)` is shared by `main.rs`
//! and the tests.

pub mod access_log;
pub mod addr;
pub mod admin;
pub mod admission;
pub mod alloc;
pub mod app;
pub mod attempts;
pub mod balance;
pub mod classify;
pub mod clock;
pub mod config;
pub mod conn;
pub mod discovery;
pub mod dispatch;
pub mod drain;
pub mod error;
pub mod forward;
pub mod gateway;
pub mod http;
pub mod idle;
pub mod inbound;
pub mod memory;
pub mod metrics;
pub mod mirror;
pub mod model;
pub mod outbound;
pub mod resilience;
pub mod routing;
pub mod tcp;
pub mod transport;

pub use app::App;
pub use config::Config;
