//! Weir's gRPC contracts (`weir.*.v1`), generated from `proto/weir/**/*.proto`. Generated code
//! only: conversions to the domain model live at the boundaries (`weir-control`'s translate,
//! `weir-proxy`'s discovery client).

#![allow(clippy::all, missing_docs)]

/// The generated packages, nested as the proto packages are (so cross-package references work).
pub mod weir {
    pub mod discovery {
        pub mod v1 {
            tonic::include_proto!("weir.discovery.v1");
        }
    }
    pub mod admin {
        pub mod v1 {
            tonic::include_proto!("weir.admin.v1");
        }
    }
}

/// `weir.discovery.v1`: per-target snapshots streamed to proxies.
pub use weir::discovery::v1 as discovery;

/// `weir.admin.v1`: the operator API `weirctl` speaks.
pub use weir::admin::v1 as admin;
