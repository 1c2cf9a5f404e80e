//! weirctl: parse the arguments (usage errors exit 2), run the command, exit 0 or 1.

use std::process::ExitCode;

use clap::Parser;
use weir_control::cli::{run, Cli};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("weirctl: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (stdout, stderr) = (std::io::stdout(), std::io::stderr());
    runtime.block_on(run(cli, &mut stdout.lock(), &mut stderr.lock()))
}
