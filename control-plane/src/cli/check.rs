//! `weirctl check`: one ✓/✗ line per check, and whether all passed.

use weir_proto::admin as pb;

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Passed.
    pub ok: bool,
    /// The line shown after ✓ or ✗.
    pub line: String,
    /// Indented lines shown under it.
    pub details: Vec<String>,
}

/// The checks a reachable control plane's answer implies.
pub fn outcomes(addr: &str, r: &pb::CheckResponse) -> Vec<Outcome> {
    let mut out = vec![Outcome {
        ok: true,
        line: format!(
            "control plane reachable ({addr}, weir-control {})",
            r.version
        ),
        details: Vec::new(),
    }];
    out.push(Outcome {
        ok: r.registry_error.is_empty(),
        line: if r.registry_error.is_empty() {
            format!(
                "registry valid ({}, version {})",
                r.registry, r.registry_version
            )
        } else {
            format!(
                "registry valid ({}: the last edit was rejected; version {} is still served)",
                r.registry, r.registry_version
            )
        },
        details: r.registry_error.lines().map(str::to_string).collect(),
    });
    out.push(Outcome {
        ok: !r.proxies.is_empty(),
        line: format!("proxies connected ({})", r.proxies.len()),
        details: Vec::new(),
    });
    let odd: Vec<String> = r
        .proxies
        .iter()
        .filter(|p| p.version != r.version)
        .map(|p| format!("{} runs {}", p.id, p.version))
        .collect();
    out.push(Outcome {
        ok: odd.is_empty(),
        line: format!("versions match (control plane {})", r.version),
        details: odd,
    });
    out
}

/// The lines printed for `outcomes`.
pub fn render(outcomes: &[Outcome]) -> String {
    let mut s = String::new();
    for o in outcomes {
        s.push_str(if o.ok { "✓ " } else { "✗ " });
        s.push_str(&o.line);
        s.push('\n');
        for d in &o.details {
            s.push_str("    ");
            s.push_str(d);
            s.push('\n');
        }
    }
    s
}
