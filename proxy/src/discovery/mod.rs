//! Where service state comes from: the standalone registry file (and, later, the per-target index).

pub mod registry_file;
pub mod watch_file;
