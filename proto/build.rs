//! Compiles `weir/**/*.proto` with protox (pure Rust, no system `protoc`) and generates the
//! prost messages and tonic clients and servers.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "weir/discovery/v1/discovery.proto",
        "weir/admin/v1/admin.proto",
    ];
    for p in &protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let fds = protox::compile(protos, ["."])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
