//! Wiring only: read config, build the runtime, run until SIGTERM, drain.

use std::{process::ExitCode, sync::Arc};

use weir_proxy::{
    config::{Config, ProcessEnv},
    transport::orig_dst::SoOriginalDst,
    App,
};

/// mimalloc: glibc's malloc cost ~250 instructions per allocation and free on the request path
/// (six a request), most of them outside its per-thread cache. Its build options are in
/// `.cargo/config.toml`; how it is entered is in `alloc.rs`.
#[global_allocator]
static ALLOC: weir_proxy::alloc::MiMalloc = weir_proxy::alloc::MiMalloc;

fn main() -> ExitCode {
    let config = match Config::from_env(&ProcessEnv) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weir-proxy: {e}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&config.log)
                .expect("Config::from_env refuses a filter that does not parse"),
        )
        .with_target(false)
        // stdout is the access log's (`WEIR_PROXY_ACCESS_LOG`); diagnostics stay apart.
        .with_writer(std::io::stderr)
        .init();
    let runtime = runtime(config.workers).expect("a Tokio runtime can be built at start-up");
    runtime.block_on(async move {
        let app = match App::build(config, Arc::new(SoOriginalDst)) {
            Ok(app) => app,
            Err(e) => {
                tracing::error!("{e}");
                return ExitCode::FAILURE;
            }
        };
        tracing::info!(
            outbound = %app.outbound_addr(),
            inbound = %app.inbound_addr(),
            admin = %app.admin_addr(),
            gateway = ?app.gateway_addr(),
            "weir-proxy serving"
        );
        app.run(sigterm()).await;
        ExitCode::SUCCESS
    })
}

/// One worker (the usual sidecar budget) runs on the current-thread scheduler: every task
/// shares the thread that polls the sockets, so no wake-up crosses threads and no work is
/// stolen. More workers get the work-stealing scheduler.
fn runtime(workers: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = if workers == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(workers);
        b
    };
    builder.enable_all().build()
}

async fn sigterm() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler installs at start-up");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler installs at start-up");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
