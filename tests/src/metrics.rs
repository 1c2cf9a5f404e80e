//! Read Prometheus text exposition in tests, and validate it with the real `promtool`.

use std::io::Write;
use std::process::{Command, Stdio};

/// One sample line: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Metric name, including `_total`/`_bucket`/... suffixes.
    pub name: String,
    /// Labels in exposition order, unescaped.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

impl Sample {
    /// The value of label `key`, if present.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Every sample in `text`; comment lines and unparsable lines are skipped.
pub fn samples(text: &str) -> Vec<Sample> {
    text.lines().filter_map(parse_line).collect()
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

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let (name, rest) = match line.find(['{', ' ']) {
        Some(i) => line.split_at(i),
        None => return None,
    };
    let (labels, rest) = if let Some(body) = rest.strip_prefix('{') {
        parse_labels(body)?
    } else {
        (Vec::new(), rest)
    };
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// Parses `k="v",k2="v2"}` and returns the labels and the text after `}`.
fn parse_labels(mut s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start_matches([',', ' ']);
        if let Some(rest) = s.strip_prefix('}') {
            return Some((labels, rest));
        }
        let (key, rest) = s.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next()? {
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (i, '"') => break i,
                (_, c) => value.push(c),
            }
        };
        labels.push((key.trim().to_owned(), value));
        s = &rest[end + 1..];
    }
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
