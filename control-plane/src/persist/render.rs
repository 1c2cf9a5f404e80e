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

/// One list item (`- name: …`) whose dash sits at column `indent`, ending in a newline.
pub(crate) fn item<T: Serialize>(value: &T, indent: usize) -> Result<String, PersistError> {
    let mut v = to_value(value)?;
    prune(&mut v);
    let text = to_text(&v)?;
    let pad = " ".repeat(indent);
    let mut out = String::with_capacity(text.len() + 16);
    for (i, line) in text.lines().enumerate() {
        if line.is_empty() {
            out.push('\n');
            continue;
        }
        out.push_str(&pad);
        out.push_str(if i == 0 { "- " } else { "  " });
        out.push_str(line);
        out.push('\n');
    }
    Ok(out)
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
