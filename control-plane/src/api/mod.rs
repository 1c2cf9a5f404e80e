//! The gRPC face of the control plane: translation of the domain model to protobuf, and the
//! services built on it.

pub mod admin;
pub mod discovery;
pub mod translate;
