//! Where service state comes from: the standalone registry file, and the index the request path reads.

pub mod index;
pub mod registry_file;
pub mod watch_file;

pub use watch_file::describe_metrics;
