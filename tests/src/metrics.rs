//! Read Prometheus text exposition in tests, and validate it with the real `promtool`.

use std::io::Write;
use std::process::{Command, Stdio};

pub use weir_control::observe::prom_text::Sample;

/// Every sample in `text` (the control plane's reader, so tests and `weirctl stat` read metrics
/// alike); panics on a line that is not valid exposition text.
pub fn samples(text: &str) -> Vec<Sample> {
    weir_control::observe::prom_text::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// Sum of the samples named `name` whose labels include all of `labels`; `None` when no series
/// matches (so a test can tell "absent" from "zero").
pub fn sum(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<f64> = samples(text)
        .into_iter()
        .filter(|s| s.name == name)
        .filter(|s| labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
        .map(|s| s.value)
        .collect();
    (!matching.is_empty()).then(|| matching.iter().sum())
}

/// Runs `promtool check metrics` on `text`: `Ok` when it passes, `Err(promtool's output)`
/// otherwise. Needs `promtool` (guard with `require!(tool "promtool")`).
pub fn promtool_check(text: &str) -> Result<(), String> {
    let mut child = Command::new(crate::skip::tool("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn promtool: {e}"));
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(text.as_bytes())
            .expect("write metrics to promtool");
    }
    let out = child.wait_with_output().expect("wait for promtool");
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "promtool check metrics: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// A proxy's `weir_tunnel*` series for some labels, read once its tunnels had closed.
#[derive(Debug, PartialEq)]
pub struct Tunnels {
    pub opened: f64,
    /// Bytes received from the client after the switch.
    pub received: f64,
    /// Bytes sent to the client after the switch.
    pub sent: f64,
}

/// `proxy`'s tunnel series matching `labels`, once `closed` tunnels have been counted closed
/// as `reason` (polled for 10 s; the splice counts its close after both sides ended).
pub async fn tunnels_closed(
    proxy: &crate::WeirProxy,
    labels: &[(&str, &str)],
    reason: &str,
    closed: f64,
) -> Tunnels {
    let mut with = labels.to_vec();
    with.push(("reason", reason));
    let what = format!("{closed} tunnel(s) closed as {reason} with {labels:?}");
    let text = crate::poll_until(std::time::Duration::from_secs(10), &what, || async {
        let text = proxy.metrics_text().await;
        (sum(&text, "weir_tunnels_closed_total", &with) == Some(closed)).then_some(text)
    })
    .await;
    let read = |name| sum(&text, name, labels).unwrap_or_else(|| panic!("no {name}:\n{text}"));
    Tunnels {
        opened: read("weir_tunnels_opened_total"),
        received: read("weir_tunnel_received_bytes_total"),
        sent: read("weir_tunnel_sent_bytes_total"),
    }
}
