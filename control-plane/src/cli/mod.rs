//! weirctl: the operator's CLI over the control plane's `weir.admin.v1` API. The arguments are
//! declared here; [`run`] executes them against any writer, so tests need not spawn a process.

mod check;
mod error;
mod format;
mod run;
mod table;
#[cfg(test)]
mod tests;
pub mod view;

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub use error::CliError;
pub use run::run;

/// weirctl: see and change a Weir mesh through its control plane.
#[derive(Debug, Parser)]
#[command(name = "weirctl", version)]
pub struct Cli {
    /// The control plane's gRPC address (`host:port` or `http://host:port`).
    #[arg(
        long,
        global = true,
        env = "WEIR_CONTROL_ADDR",
        default_value = "127.0.0.1:8086",
        value_name = "ADDR"
    )]
    pub control_plane: String,
    /// Output format.
    #[arg(short, long, global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned columns for people.
    Table,
    /// The response as JSON.
    Json,
    /// The response as YAML.
    Yaml,
}

/// weirctl's commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List services, or one service's endpoints.
    #[command(subcommand)]
    Get(Get),
    /// Show one service in detail, with its endpoints' live state.
    #[command(subcommand)]
    Describe(Describe),
    /// Create or replace the services and gateway routes a registry document declares.
    Apply {
        /// The registry document; `-` reads standard input.
        #[arg(short = 'f', long = "filename", value_name = "FILE")]
        file: String,
        /// Validate and show the diff without writing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Edit service policy.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Check the control plane, the registry, and the connected proxies.
    Check,
    /// Success rate, RPS and latency per service and route, from the proxies' metrics.
    Stat(StatArgs),
}

/// `get …`.
#[derive(Debug, Subcommand)]
pub enum Get {
    /// Every service in the registry.
    Services,
    /// The endpoints of one service.
    Endpoints {
        /// `name` or `name.namespace`.
        service: String,
    },
}

/// `describe …`.
#[derive(Debug, Subcommand)]
pub enum Describe {
    /// One service.
    Service {
        /// `name` or `name.namespace`.
        service: String,
    },
}

/// `policy …`.
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Change some policy fields of one service; the others are left as they are.
    Set(PolicySet),
}

/// `policy set SVC …`.
#[derive(Debug, Args)]
pub struct PolicySet {
    /// `name` or `name.namespace`.
    pub service: String,
    /// The fields to change.
    #[command(flatten)]
    pub fields: PolicyFields,
    /// Validate and show the diff without writing.
    #[arg(long)]
    pub dry_run: bool,
}

/// The policy fields `policy set` can change; at least one is required.
#[derive(Debug, Args)]
#[group(required = true, multiple = true)]
pub struct PolicyFields {
    /// Request timeout (`2s`, `500ms`); `0s` removes it.
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// Retries allowed as a fraction of requests (0 to 1).
    #[arg(long, value_name = "RATIO")]
    pub retry_budget: Option<f64>,
    /// Retries always allowed per second.
    #[arg(long, value_name = "N")]
    pub retry_min_per_second: Option<u32>,
    /// Consecutive failures that eject an endpoint; 0 removes the threshold.
    #[arg(long, value_name = "N")]
    pub consecutive_failures: Option<u32>,
    /// Requests in flight to the service at most; 0 removes the cap.
    #[arg(long, value_name = "N")]
    pub max_concurrent_requests: Option<u32>,
    /// Requests waiting for a slot under the concurrency cap, at most; 0 removes the queue.
    #[arg(long, value_name = "N")]
    pub max_pending_requests: Option<u32>,
    /// How long a request waits for a slot or a ready endpoint (`250ms`); `0s`: the default.
    #[arg(long, value_name = "DURATION")]
    pub failfast: Option<String>,
    /// Requests per second allowed, and optionally the burst (`100`, `100/20`, `0.5/1`); 0
    /// removes the rate limit.
    #[arg(long, value_name = "RPS[/BURST]", value_parser = rate_limit)]
    pub rate_limit: Option<(f64, Option<u32>)>,
    /// Rate-limit burst.
    #[arg(long, value_name = "N")]
    pub burst: Option<u32>,
    /// An ejected endpoint's first ejection (`5s`); `0s`: the default.
    #[arg(long, value_name = "DURATION")]
    pub min_ejection: Option<String>,
    /// The longest ejection, however often the probe fails (`2m`); `0s`: the default.
    #[arg(long, value_name = "DURATION")]
    pub max_ejection: Option<String>,
}

/// `RPS` or `RPS/BURST`.
fn rate_limit(s: &str) -> Result<(f64, Option<u32>), String> {
    let (rps, burst) = match s.split_once('/') {
        Some((r, b)) => (r, Some(b)),
        None => (s, None),
    };
    let rps: f64 = rps
        .trim()
        .parse()
        .map_err(|_| format!("{rps:?} is not a number of requests per second"))?;
    let burst = burst
        .map(|b| b.trim().parse::<u32>())
        .transpose()
        .map_err(|_| "the burst after `/` must be a whole number".to_string())?;
    Ok((rps, burst))
}

/// `stat [SVC] …`.
#[derive(Debug, Args)]
pub struct StatArgs {
    /// One service (`name` or `name.namespace`); all when omitted.
    pub service: Option<String>,
    /// Rates are computed over this window.
    #[arg(long, default_value = "10s", value_parser = positive_duration)]
    pub window: Duration,
    /// Print again every interval until interrupted.
    #[arg(long)]
    pub watch: bool,
    /// Time between prints with `--watch`.
    #[arg(long, default_value = "2s", value_parser = positive_duration)]
    pub interval: Duration,
}

fn positive_duration(s: &str) -> Result<Duration, String> {
    match weir_proxy::model::parse_duration(s)? {
        d if d.is_zero() => Err("must be more than zero".into()),
        d => Ok(d),
    }
}
