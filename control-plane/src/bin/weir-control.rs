//! weir-control: serve the registry file to every proxy over gRPC (`serve`, the default), or
//! validate a registry file exactly as the proxy does (`check FILE`). Wiring only.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode};

use clap::{Args, CommandFactory, Parser, Subcommand};
use weir_control::server::{ControlConfig, ControlPlane};

#[derive(Debug, Parser)]
#[command(name = "weir-control", version, about = "Weir's control plane")]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the registry over gRPC (the default when no subcommand is given).
    Serve(ServeArgs),
    /// Validate a registry file and exit: 0 if valid, 1 with every located problem if not.
    Check {
        /// The registry file.
        file: PathBuf,
    },
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// The registry file to serve; watched and hot-reloaded.
    #[arg(long, env = "WEIR_CONTROL_REGISTRY", value_name = "FILE")]
    registry: Option<PathBuf>,
    /// gRPC listener (Discovery and Admin APIs).
    #[arg(long, env = "WEIR_CONTROL_GRPC_LISTEN", default_value = "0.0.0.0:8086")]
    grpc_listen: SocketAddr,
    /// HTTP admin listener (/metrics, /ready, /live).
    #[arg(
        long,
        env = "WEIR_CONTROL_ADMIN_LISTEN",
        default_value = "0.0.0.0:9996"
    )]
    admin_listen: SocketAddr,
    /// Log filter (tracing env-filter syntax).
    #[arg(long, env = "WEIR_CONTROL_LOG", default_value = "info")]
    log: String,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Check { file }) => check(&file),
        Some(Command::Serve(args)) => serve(args),
        None => serve(cli.serve),
    }
}

fn check(path: &std::path::Path) -> ExitCode {
    match weir_proxy::discovery::registry_file::load(path) {
        Ok(reg) => {
            println!(
                "{}: ok ({} services, {} gateway routes)",
                path.display(),
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

fn serve(args: ServeArgs) -> ExitCode {
    let Some(registry) = args.registry else {
        Cli::command()
            .error(
                clap::error::ErrorKind::MissingRequiredArgument,
                "--registry FILE (or WEIR_CONTROL_REGISTRY) is required to serve",
            )
            .exit();
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log).unwrap_or_else(|e| {
        eprintln!(
            "weir-control: bad --log filter {:?} ({e}); using info",
            args.log
        );
        tracing_subscriber::EnvFilter::new("info")
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let runtime =
        tokio::runtime::Runtime::new().expect("the OS provides threads and an event loop");
    let cfg = ControlConfig {
        registry,
        grpc_listen: args.grpc_listen,
        admin_listen: args.admin_listen,
        registry_poll: weir_control::sources::file::DEFAULT_POLL,
    };
    runtime.block_on(async {
        weir_control::metrics::handle();
        let control = match ControlPlane::build(cfg).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("weir-control: {e}");
                return ExitCode::FAILURE;
            }
        };
        match control.run(stop_signal()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!("gRPC server failed: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

/// Resolves on SIGTERM or SIGINT.
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("a SIGTERM handler can be installed");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT"),
    }
}
