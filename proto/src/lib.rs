//! Weir gRPC contracts (`weir.*.v1`). The discovery and admin protos land with the control plane (issue 3).
