//! Wiring only: read config, build the runtime, run until SIGTERM, drain.
fn main() {}
