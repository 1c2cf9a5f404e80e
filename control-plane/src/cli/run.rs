//! Executes a parsed weirctl command: one admin RPC (or a loop of them for `stat --watch`), its
//! answer printed in the chosen format, and the exit code.

use std::{io::Write, process::ExitCode, time::Duration};

use serde::Serialize;
use tonic::transport::{Channel, Endpoint};
use weir_proto::admin::{self as pb, admin_client::AdminClient};

use super::{
    check, format, view, Cli, CliError, Command, Describe, Get, Output, PolicyCommand, PolicySet,
    StatArgs,
};

type Client = AdminClient<Channel>;

/// Runs `cli`, printing results to `out` and failures to `err`: 0 when it worked, 1 when it
/// failed (unreachable control plane, rejected write, failed check).
pub async fn run(cli: Cli, out: &mut impl Write, err: &mut impl Write) -> ExitCode {
    match execute(&cli, out).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            // Nothing more can be done if stderr itself is gone.
            let _ = writeln!(err, "weirctl: {e}");
            for line in e.details() {
                let _ = writeln!(err, "  {line}");
            }
            ExitCode::FAILURE
        }
    }
}

/// `Ok(false)`: the command ran and reported a failure itself (a failed check).
async fn execute(cli: &Cli, out: &mut impl Write) -> Result<bool, CliError> {
    let addr = cli.control_plane.as_str();
    match &cli.command {
        Command::Check => check(addr, cli.output, out).await,
        command => {
            let mut client = connect(addr).await?;
            rpc(&mut client, command, cli.output, out).await?;
            Ok(true)
        }
    }
}

async fn rpc(
    client: &mut Client,
    command: &Command,
    o: Output,
    out: &mut impl Write,
) -> Result<(), CliError> {
    match command {
        Command::Get(Get::Services) => {
            let r = client
                .list_services(pb::ListServicesRequest {})
                .await
                .map_err(CliError::Rpc)?
                .into_inner();
            emit(out, o, &view::Services::from(&r), || format::services(&r))
        }
        Command::Get(Get::Endpoints { service }) => {
            let r = describe(client, service).await?;
            match &r.service {
                Some(s) => emit(out, o, &view::Endpoints::new(s), || format::endpoints(s)),
                None => Ok(()),
            }
        }
        Command::Describe(Describe::Service { service }) => {
            let r = describe(client, service).await?;
            emit(out, o, &view::Describe::from(&r), || format::describe(&r))
        }
        Command::Apply { file, dry_run } => {
            let request = pb::ApplyRequest {
                document: read_input(file)?,
                dry_run: *dry_run,
                source_name: file.clone(),
            };
            let r = client.apply(request).await.map_err(CliError::Rpc)?;
            let r = r.into_inner();
            emit(out, o, &view::Apply::from(&r), || {
                format::apply(&r, *dry_run)
            })
        }
        Command::Policy(PolicyCommand::Set(set)) => {
            let r = client
                .set_policy(policy_request(set))
                .await
                .map_err(CliError::Rpc)?
                .into_inner();
            emit(out, o, &view::Apply::from(&r), || {
                format::apply(&r, set.dry_run)
            })
        }
        Command::Stat(args) => stat(client, args, o, out).await,
        // Answered by `check`, which reports an unreachable control plane as a failed check.
        Command::Check => Ok(()),
    }
}

async fn connect(addr: &str) -> Result<Client, CliError> {
    let url = if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    };
    let endpoint = Endpoint::from_shared(url)
        .map_err(|e| CliError::unreachable(addr, &e))?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30));
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| CliError::unreachable(addr, &e))?;
    Ok(AdminClient::new(channel))
}

async fn describe(
    client: &mut Client,
    service: &str,
) -> Result<pb::DescribeServiceResponse, CliError> {
    let request = pb::DescribeServiceRequest {
        service: service.to_string(),
    };
    let r = client.describe_service(request).await;
    Ok(r.map_err(CliError::Rpc)?.into_inner())
}

async fn check(addr: &str, o: Output, out: &mut impl Write) -> Result<bool, CliError> {
    let reply = match connect(addr).await {
        Ok(mut client) => client
            .check(pb::CheckRequest {})
            .await
            .map_err(CliError::Rpc),
        Err(e) => Err(e),
    };
    let r = match reply {
        Ok(r) => r.into_inner(),
        Err(e) => {
            if o == Output::Table {
                let line = format!("✗ control plane reachable ({addr})\n");
                out.write_all(line.as_bytes())
                    .map_err(|e| CliError::Output(e.to_string()))?;
            }
            return Err(e);
        }
    };
    let outcomes = check::outcomes(addr, &r);
    emit(out, o, &view::Check::from(&r), || check::render(&outcomes))?;
    Ok(outcomes.iter().all(|c| c.ok))
}

fn policy_request(set: &PolicySet) -> pb::SetPolicyRequest {
    let f = &set.fields;
    pb::SetPolicyRequest {
        service: set.service.clone(),
        timeout: f.timeout.clone(),
        retry_budget_ratio: f.retry_budget,
        retry_budget_min_per_second: f.retry_min_per_second,
        consecutive_failures: f.consecutive_failures,
        max_concurrent_requests: f.max_concurrent_requests,
        rate_limit_rps: f.rate_limit.map(|(rps, _)| rps),
        rate_limit_burst: f.rate_limit.and_then(|(_, burst)| burst).or(f.burst),
        dry_run: set.dry_run,
        max_pending_requests: f.max_pending_requests,
        failfast: f.failfast.clone(),
        min_ejection: f.min_ejection.clone(),
        max_ejection: f.max_ejection.clone(),
    }
}

async fn stat(
    client: &mut Client,
    args: &StatArgs,
    o: Output,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let window = weir_proxy::model::format_duration(args.window);
    let request = pb::StatRequest {
        service: args.service.clone().unwrap_or_default(),
        window_seconds: u32::try_from(args.window.as_secs().max(1)).unwrap_or(u32::MAX),
    };
    loop {
        let mut r = client
            .stat(request.clone())
            .await
            .map_err(CliError::Rpc)?
            .into_inner();
        format::drop_idle_rows(&mut r, args.service.as_deref());
        emit(out, o, &view::Stat::from(&r), || format::stat(&r, &window))?;
        if !args.watch {
            return Ok(());
        }
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            _ = tokio::time::sleep(args.interval) => {}
        }
        out.write_all(b"\n")
            .map_err(|e| CliError::Output(e.to_string()))?;
    }
}

fn read_input(file: &str) -> Result<String, CliError> {
    let read = if file == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(file)
    };
    read.map_err(|source| CliError::Read {
        path: file.to_string(),
        source,
    })
}

/// Prints `data` as JSON or YAML, or `table()` for a person.
fn emit<T: Serialize>(
    out: &mut impl Write,
    o: Output,
    data: &T,
    table: impl FnOnce() -> String,
) -> Result<(), CliError> {
    let text = match o {
        Output::Table => table(),
        Output::Json => serde_json::to_string_pretty(data)
            .map(|s| s + "\n")
            .map_err(|e| CliError::Output(e.to_string()))?,
        Output::Yaml => serde_yaml::to_string(data).map_err(|e| CliError::Output(e.to_string()))?,
    };
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| CliError::Output(e.to_string()))
}
