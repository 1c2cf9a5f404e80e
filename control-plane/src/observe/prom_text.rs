//! A reader for the Prometheus text exposition format (0.0.4), as much as weir-proxy's
//! `/metrics` renders: names, label sets with escaped values, floats including ±Inf and NaN.

/// Label (name, value) pairs, in the order written.
pub type Labels = Vec<(String, String)>;

/// One sample line: `name{label="value",…} value [timestamp]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Metric name, with any `_bucket`/`_sum`/`_count` suffix kept.
    pub name: String,
    /// Labels in the order written, values unescaped.
    pub labels: Labels,
    /// The sample value.
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

/// A line that is not valid exposition text.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("metrics line {line}: {reason}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

/// Every sample in `text`; comments (`# HELP`, `# TYPE`) and blank lines are skipped.
pub fn parse(text: &str) -> Result<Vec<Sample>, ParseError> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .map(|(line, l)| parse_line(l).map_err(|reason| ParseError { line, reason }))
        .collect()
}

fn parse_line(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if !is_name(name, true) {
        return Err(format!("`{name}` is not a metric name"));
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after_brace) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(after_brace)?;
        labels = parsed;
        rest = after;
    }
    let mut fields = rest.split_whitespace();
    let value = fields.next().ok_or("missing value")?;
    let value = parse_value(value).ok_or_else(|| format!("`{value}` is not a number"))?;
    // An optional timestamp may follow; we do not use it.
    if fields.nth(1).is_some() {
        return Err("unexpected text after value and timestamp".into());
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Parses `k="v",…}` and returns the labels and what follows the closing brace.
fn parse_labels(s: &str) -> Result<(Labels, &str), String> {
    let mut labels = Vec::new();
    let mut rest = s.trim_start();
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = rest.find('=').ok_or("label without `=`")?;
        let key = rest[..eq].trim();
        if !is_name(key, false) {
            return Err(format!("`{key}` is not a label name"));
        }
        rest = rest[eq + 1..]
            .trim_start()
            .strip_prefix('"')
            .ok_or_else(|| format!("label {key}: value must be quoted"))?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err(format!("label {key}: unterminated value")),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    Some((_, c)) => {
                        value.push('\\');
                        value.push(c);
                    }
                    None => return Err(format!("label {key}: unterminated value")),
                },
                Some((_, c)) => value.push(c),
            }
        };
        labels.push((key.to_string(), value));
        rest = rest[end + 1..].trim_start();
        if let Some(after) = rest.strip_prefix(',') {
            rest = after.trim_start();
        } else if !rest.starts_with('}') {
            return Err(format!("label {key}: expected `,` or `}}` after the value"));
        }
    }
}

fn is_name(s: &str, colon_ok: bool) -> bool {
    let ok = |c: char| c.is_ascii_alphanumeric() || c == '_' || (colon_ok && c == ':');
    s.chars()
        .next()
        .is_some_and(|c| !c.is_ascii_digit() && ok(c))
        && s.chars().all(ok)
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROXY_METRICS: &str = include_str!("testdata/proxy-metrics.txt");

    fn find<'a>(samples: &'a [Sample], name: &str, labels: &[(&str, &str)]) -> Option<&'a Sample> {
        samples
            .iter()
            .find(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(v)))
    }

    #[test]
    fn reads_every_sample_a_running_proxy_renders() {
        let samples = parse(PROXY_METRICS).expect("a real proxy's /metrics parses");
        let non_comment = PROXY_METRICS
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .count();
        assert_eq!(samples.len(), non_comment);
        let gw = [
            ("direction", "gateway"),
            ("service", "echo.default"),
            ("route", "echo"),
        ];
        let requests = find(&samples, "weir_requests_total", &gw).expect("gateway echo requests");
        assert_eq!(requests.value, 26.0);
        let mut le_inf = gw.to_vec();
        le_inf.push(("le", "+Inf"));
        let inf = find(&samples, "weir_request_duration_seconds_bucket", &le_inf)
            .expect("the +Inf bucket");
        assert_eq!(inf.value, 26.0);
        let five_xx = find(&samples, "weir_responses_total", &[("status_code", "502")])
            .expect("the 502 the proxy answered after the backend went away");
        assert_eq!(five_xx.label("status_class"), Some("5xx"));
        assert_eq!(five_xx.value, 1.0);
        let unlabelled = find(&samples, "weir_endpoint_connect_failures_total", &[])
            .expect("a sample without labels");
        assert!(unlabelled.labels.is_empty());
    }

    #[test]
    fn unescapes_label_values_and_reads_special_floats() {
        let text = "m{a=\"x\\\"y\\\\z\\n\", b = \"}{,\",} +Inf 1700000000\nm -Inf\nm NaN\nm 1e-3\n";
        let samples = parse(text).expect("valid exposition text");
        assert_eq!(samples[0].label("a"), Some("x\"y\\z\n"));
        assert_eq!(samples[0].label("b"), Some("}{,"));
        assert_eq!(samples[0].value, f64::INFINITY);
        assert_eq!(samples[1].value, f64::NEG_INFINITY);
        assert!(samples[2].value.is_nan());
        assert_eq!(samples[3].value, 0.001);
    }

    #[test]
    fn names_the_line_that_is_not_exposition_text() {
        let err = parse("# HELP m x\nm 1\nm{a=\"1\" b=\"2\"} 3\n").expect_err("missing comma");
        assert_eq!(err.line, 3);
        assert!(err.reason.contains("label a"), "{err}");
        let err = parse("m{a=\"1\"} many\n").expect_err("not a number");
        assert_eq!(err.to_string(), "metrics line 1: `many` is not a number");
        assert!(parse("m{a=\"open} 1\n").is_err());
        assert!(parse("9m 1\n").is_err());
    }
}
