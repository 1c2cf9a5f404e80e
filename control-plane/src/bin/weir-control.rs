//! weir-control: the control plane arrives with issue 3. Until then it validates a registry file
//! exactly as the proxy does, so operators can check an edit before applying it.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [cmd, path] if cmd == "check" => {
            match weir_proxy::discovery::registry_file::load(path.as_ref()) {
                Ok(reg) => {
                    println!(
                        "{path}: ok ({} services, {} gateway routes)",
                        reg.services.len(),
                        reg.gateway.routes.len()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::FAILURE
                }
            }
        }
        _ => {
            eprintln!("usage: weir-control check REGISTRY_FILE\n(the gRPC control plane lands with issue 3; run weir-proxy with WEIR_PROXY_REGISTRY meanwhile)");
            ExitCode::from(2)
        }
    }
}
