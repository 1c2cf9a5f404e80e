//! The standalone registry file (`WEIR_PROXY_REGISTRY=FILE`): read, parse and validate it, and say
//! exactly where every problem is (`file:line:column: path: reason`).

mod locate;
#[cfg(test)]
pub(crate) mod tests;
mod validate;

use std::{fmt, path::Path};

use crate::model::Registry;

/// One problem in a registry file, pinned to a 1-based line and column.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}:{line}:{column}: {message}")]
pub struct Problem {
    /// The file name (or other origin) the text came from.
    pub origin: String,
    /// 1-based line of the offending value, key or mapping.
    pub line: usize,
    /// 1-based column on that line.
    pub column: usize,
    /// `field.path[0]: reason`.
    pub message: String,
}

/// Why a registry file could not be used. The previous good registry stays in force.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The file could not be read (missing, unreadable, not UTF-8).
    #[error("{path}: {source}")]
    Read {
        /// The path as given.
        path: String,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The file was read but is not a valid registry: every problem found, in document order.
    #[error("{}", Lines(.0))]
    Invalid(Vec<Problem>),
}

impl RegistryError {
    /// The located problems (empty for a read error).
    pub fn problems(&self) -> &[Problem] {
        match self {
            RegistryError::Read { .. } => &[],
            RegistryError::Invalid(problems) => problems,
        }
    }
}

struct Lines<'a>(&'a [Problem]);

impl fmt::Display for Lines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            fmt::Display::fmt(p, f)?;
        }
        Ok(())
    }
}

/// Reads and parses the registry file at `path`; problems name the path as given.
pub fn load(path: &Path) -> Result<Registry, RegistryError> {
    let origin = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => parse(&origin, &text),
        Err(source) => Err(RegistryError::Read {
            path: origin,
            source,
        }),
    }
}

/// Parses and validates registry YAML. Host names come back lower-cased. A type or syntax error
/// stops serde, so each service and gateway route is then re-read on its own to report one such
/// error per item; semantic problems are all reported.
pub fn parse(origin: &str, text: &str) -> Result<Registry, RegistryError> {
    if is_blank(text) {
        // A truncated or half-written file must not silently withdraw every service.
        let message = "the registry is empty; write `services: []` to serve no services";
        return Err(RegistryError::Invalid(vec![Problem {
            origin: origin.to_string(),
            line: 1,
            column: 1,
            message: message.to_string(),
        }]));
    }
    let mut registry: Registry = match serde_yaml::from_str(text) {
        Ok(registry) => registry,
        Err(first) => {
            let errors = locate::structural_errors(text, first);
            let problems = errors.iter().map(|e| from_serde(origin, text, e)).collect();
            return Err(RegistryError::Invalid(sorted(problems)));
        }
    };
    let issues = validate::validate(&mut registry);
    if issues.is_empty() {
        return Ok(registry);
    }
    let problems = issues
        .into_iter()
        .map(|issue| {
            let (line, column) = locate::locate(text, &issue.path).unwrap_or((1, 1));
            let path = locate::display_path(&issue.path);
            Problem {
                origin: origin.to_string(),
                line,
                column,
                message: format!("{path}: {}", issue.message),
            }
        })
        .collect();
    Err(RegistryError::Invalid(sorted(problems)))
}

fn is_blank(text: &str) -> bool {
    text.lines().all(|l| {
        let l = l.trim();
        l.is_empty() || l.starts_with('#') || l == "---" || l == "..."
    })
}

fn sorted(mut problems: Vec<Problem>) -> Vec<Problem> {
    // Stable: problems at one spot keep the order the checks found them.
    problems.sort_by_key(|p| (p.line, p.column));
    problems.dedup();
    problems
}

fn from_serde(origin: &str, text: &str, e: &serde_yaml::Error) -> Problem {
    let mut message = e.to_string();
    let (line, column) = match e.location() {
        Some(l) => (l.line(), l.column()),
        None => (1, 1),
    };
    // serde_yaml appends its own " at line L column C"; we put the position in front instead.
    let suffix = format!(" at line {line} column {column}");
    if let Some(at) = message.find(&suffix) {
        message.replace_range(at..at + suffix.len(), "");
    }
    // At the end of a file without a final line break, libyaml reports the start of the line
    // after the last one; point at the end of the last line instead, which an editor can show.
    let (last, tail) = yaml_lines(text).enumerate().last().unwrap_or_default();
    let (line, column) = if line > last + 1 {
        (last + 1, tail.chars().count() + 1)
    } else {
        (line, column)
    };
    Problem {
        origin: origin.to_string(),
        line,
        column,
        message,
    }
}

/// The lines of `text` as YAML (libyaml) counts them: broken at CR LF, LF, CR, NEL, LS and PS.
pub(crate) fn yaml_lines(text: &str) -> impl Iterator<Item = &str> {
    text.split("\r\n")
        .flat_map(|l| l.split(['\n', '\r', '\u{85}', '\u{2028}', '\u{2029}']))
}
