//! Where service state comes from: the control plane (per-target watches), the standalone
//! registry file, and the index the request path reads.

pub mod control;
pub mod from_proto;
pub mod index;
#[cfg(any(test, fuzzing))]
pub mod props;
pub mod registry_file;
pub mod watch_file;

pub use watch_file::describe_metrics;
