//! Why a weirctl command failed: a one-line reason for stderr, plus the problems behind it.

use tonic::{Code, Status};

/// A failed command (exit code 1).
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// No connection to the control plane.
    #[error("cannot reach the control plane at {addr}: {reason}")]
    Unreachable {
        /// The address tried.
        addr: String,
        /// Why, with the transport's own causes.
        reason: String,
    },
    /// The control plane answered with an error.
    #[error("{}", rpc_reason(.0))]
    Rpc(Status),
    /// The input file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file as given (`-` for standard input).
        path: String,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// Printing the result failed.
    #[error("cannot print the result: {0}")]
    Output(String),
}

impl CliError {
    /// The problems behind the reason, one per line (validation errors, mostly).
    pub fn details(&self) -> Vec<String> {
        match self {
            CliError::Rpc(s) if s.code() == Code::InvalidArgument => {
                s.message().lines().map(str::to_string).collect()
            }
            CliError::Rpc(s) => s.message().lines().skip(1).map(str::to_string).collect(),
            _ => Vec::new(),
        }
    }

    /// An error from `addr`'s transport, with its chain of causes.
    pub fn unreachable(addr: &str, e: &dyn std::error::Error) -> Self {
        let mut reason = e.to_string();
        let mut last = reason.clone();
        let mut cause = e.source();
        while let Some(c) = cause {
            // hyper and tonic wrap some errors in a layer that repeats the inner message.
            let text = c.to_string();
            if text != last {
                reason.push_str(": ");
                reason.push_str(&text);
            }
            last = text;
            cause = c.source();
        }
        CliError::Unreachable {
            addr: addr.to_string(),
            reason,
        }
    }
}

fn rpc_reason(s: &Status) -> String {
    let first = s.message().lines().next().unwrap_or("");
    match s.code() {
        Code::InvalidArgument => {
            let n = s.message().lines().count();
            format!("rejected: {n} problem(s); nothing was written")
        }
        Code::NotFound | Code::FailedPrecondition => first.to_string(),
        Code::Unavailable => format!("the control plane is unavailable: {first}"),
        code => format!("the control plane failed ({code:?}): {first}"),
    }
}
