//! weir-control: grows into the control plane in issue 3.
fn main() {}
