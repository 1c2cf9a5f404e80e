//! Properties the registry file's loader keeps for any text: it never panics, a refusal names
//! at least one problem and every problem a line and column inside the text, and a registry it
//! accepts builds an index (fresh and as a reload) that routes requests without panicking.
//! Checked on seeded mutations of DESIGN.md's example by the unit tests (`props/tests.rs`) and
//! with coverage guidance by `cargo fuzz` (`proxy/fuzz`).

use std::sync::Arc;

use http::{HeaderMap, HeaderValue, Method, Uri};

use crate::discovery::{index::Snapshot, registry_file};

/// Requests every accepted registry's tables are asked to route.
const PROBES: &[(&str, &str)] = &[
    ("GET", "/"),
    ("GET", "/api/v1/x?debug=1&a=b"),
    ("POST", "/auth-service/login"),
    ("DELETE", "/%2e%2e/x"),
];

/// Parses `data` as a registry file and, if accepted, builds and exercises its index.
pub fn registry_text(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let registry = match registry_file::parse("fuzz.yaml", text) {
        Ok(registry) => registry,
        Err(e) => {
            let problems = e.problems();
            assert!(!problems.is_empty(), "refused with no problem named");
            let lines = registry_file::yaml_lines(text).count();
            for p in problems {
                assert!(
                    (1..=lines).contains(&p.line) && p.column >= 1,
                    "{p} outside the {lines} lines of the text"
                );
                assert!(!p.message.is_empty(), "{p}: no reason");
            }
            return;
        }
    };
    let first = Snapshot::build(Arc::new(registry.clone()), None);
    let reloaded = Snapshot::build(Arc::new(registry), Some(&first));
    let mut headers = HeaderMap::new();
    headers.insert("x-user", HeaderValue::from_static("alice"));
    headers.insert("content-type", HeaderValue::from_static("application/grpc"));
    for (method, target) in PROBES {
        let (method, uri) = (
            Method::from_bytes(method.as_bytes()).expect("probe method"),
            Uri::from_static(target),
        );
        let tables = std::iter::once(&reloaded.gateway.table)
            .chain(reloaded.services().iter().map(|s| &s.routes.table));
        for table in tables {
            if let Some(selected) = table.select(&method, &uri, &headers) {
                for rnd in [0, 1, u32::MAX / 2, u32::MAX] {
                    let _ = table.pick_backend(selected.index, rnd);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
