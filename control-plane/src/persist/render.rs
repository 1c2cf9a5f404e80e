//! YAML text for registry items and whole registries, written the way people write the file:
//! fields the reader fills in by default (`null`, empty lists) are left out, labels are sorted so
//! a re-render gives the same text.

use serde::Serialize;
use serde_yaml::{Mapping, Value};
use weir_proxy::model::Registry;

use super::PersistError;

/// Keys whose empty mapping means the same as no key at all (non-`Option` defaults). Elsewhere an
/// empty mapping is meaningful (`retry: {}` turns retries on with defaults), so it stays.
const EMPTY_MAP_IS_DEFAULT: [&str; 3] = ["policy", "labels", "gateway"];

/// One list item (`- name: …`) whose dash sits at column `indent`, ending in a newline;
/// `indented_lists` writes block lists two columns deeper than their key.
pub(crate) fn item<T: Serialize>(
    value: &T,
    indent: usize,
    indented_lists: bool,
) -> Result<String, PersistError> {
    let text = to_text(&self::value(value)?)?;
    Ok(pad(&text, indent, indented_lists, "- "))
}

/// An item as the file would hold it: defaults left out, labels sorted.
pub(crate) fn value<T: Serialize>(item: &T) -> Result<Value, PersistError> {
    let mut v = to_value(item)?;
    prune(&mut v);
    Ok(v)
}

/// `key: value` (or `key:` and the value's lines below) with the key at column `indent`.
pub(crate) fn entry(
    key: &str,
    value: &Value,
    indent: usize,
    indented_lists: bool,
) -> Result<String, PersistError> {
    let mut one = Mapping::new();
    one.insert(key.into(), value.clone());
    let text = to_text(&Value::Mapping(one))?;
    Ok(pad(&text, indent, indented_lists, ""))
}

/// `text` shifted right by `indent`, its first line starting with `first`.
fn pad(text: &str, indent: usize, indented_lists: bool, first: &str) -> String {
    let text = if indented_lists {
        indent_lists(text)
    } else {
        text.to_string()
    };
    let pad = " ".repeat(indent);
    let rest = " ".repeat(first.len());
    let mut out = String::with_capacity(text.len() + 16);
    for (i, line) in text.lines().enumerate() {
        if !line.is_empty() {
            out.push_str(&pad);
            out.push_str(if i == 0 { first } else { &rest });
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// serde_yaml writes a block list at its key's column (`key:` / `- a`); many files put it two
/// columns deeper (`key:` / `  - a`). Shifts every such list, and all it holds, by two.
fn indent_lists(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    // Original columns of the lists being shifted, innermost last.
    let mut shifted: Vec<usize> = Vec::new();
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    for (i, line) in lines.iter().enumerate() {
        let body = line.trim_start_matches(' ');
        let col = line.len() - body.len();
        while let Some(&list) = shifted.last() {
            if col > list || (col == list && is_dash(body)) {
                break;
            }
            shifted.pop();
        }
        if !line.is_empty() {
            out.push_str(&" ".repeat(2 * shifted.len()));
        }
        out.push_str(line);
        out.push('\n');
        let mut key = body;
        while let Some(rest) = key.strip_prefix("- ") {
            key = rest;
        }
        let key_col = line.len() - key.len();
        let next = lines.get(i + 1).copied().unwrap_or_default();
        let next_body = next.trim_start_matches(' ');
        if key.ends_with(':') && next.len() - next_body.len() == key_col && is_dash(next_body) {
            shifted.push(key_col);
        }
    }
    out
}

fn is_dash(body: &str) -> bool {
    body == "-" || body.starts_with("- ")
}

/// A whole registry file: used when the file on disk cannot be edited in place.
pub(crate) fn whole(registry: &Registry) -> Result<String, PersistError> {
    let mut v = to_value(registry)?;
    prune(&mut v);
    if let Value::Mapping(top) = &mut v {
        // An empty registry must still say so: a blank file is refused as a truncated one.
        if !top.contains_key("services") {
            top.insert("services".into(), Value::Sequence(Vec::new()));
        }
    }
    to_text(&v)
}

fn to_value<T: Serialize>(value: &T) -> Result<Value, PersistError> {
    serde_yaml::to_value(value).map_err(|e| PersistError::Render(e.to_string()))
}

fn to_text(v: &Value) -> Result<String, PersistError> {
    serde_yaml::to_string(v).map_err(|e| PersistError::Render(e.to_string()))
}

fn prune(v: &mut Value) {
    match v {
        Value::Sequence(items) => items.iter_mut().for_each(prune),
        Value::Mapping(map) => prune_mapping(map),
        _ => {}
    }
}

fn prune_mapping(map: &mut Mapping) {
    for (_, child) in map.iter_mut() {
        prune(child);
    }
    map.retain(|key, child| match child {
        Value::Null => false,
        Value::Sequence(s) => !s.is_empty(),
        Value::Mapping(m) => {
            !(m.is_empty()
                && key
                    .as_str()
                    .is_some_and(|k| EMPTY_MAP_IS_DEFAULT.contains(&k)))
        }
        _ => true,
    });
    if let Some(Value::Mapping(labels)) = map.get_mut("labels") {
        let mut entries: Vec<(Value, Value)> = std::mem::take(labels).into_iter().collect();
        entries.sort_by(|a, b| a.0.as_str().cmp(&b.0.as_str()));
        labels.extend(entries);
    }
}
