//! Reads the registry document `weirctl apply` sends: problems are reported at the document's own
//! lines, except references to services that only the registry (not the document) declares,
//! which the merged registry settles.

use weir_proxy::{
    discovery::registry_file::{self, Problem, RegistryError},
    model::Registry,
};

use super::{
    scan::{self, ListSpot},
    Changes, PersistError,
};

/// The services and gateway routes `text` (named `source` in problems) asks for.
pub(crate) fn read(source: &str, text: &str, base: &Registry) -> Result<Changes, PersistError> {
    let doc = match registry_file::parse(source, text) {
        Ok(doc) => doc,
        Err(RegistryError::Invalid(problems)) => unresolved_only(text, problems, base)?,
        Err(e) => return Err(PersistError::Invalid(vec![e.to_string()])),
    };
    check_route_names(source, text, &doc)?;
    Ok(Changes {
        services: doc.services,
        routes: doc.gateway.routes,
    })
}

/// The document's registry when its only problems are backendRefs to services `base` has.
fn unresolved_only(
    text: &str,
    problems: Vec<Problem>,
    base: &Registry,
) -> Result<Registry, PersistError> {
    let real: Vec<String> = problems
        .iter()
        .filter(|p| !missing_ref(&p.message).is_some_and(|(ns, name)| declares(base, ns, name)))
        .map(|p| p.to_string())
        .collect();
    if !real.is_empty() {
        return Err(PersistError::Invalid(real));
    }
    // Structurally sound (parse got past serde), so this succeeds; only the checks above failed.
    let mut doc: Registry = serde_yaml::from_str(text)
        .map_err(|e| PersistError::Invalid(vec![format!("document: {e}")]))?;
    // What registry_file::parse would have normalised.
    for svc in &mut doc.services {
        for host in &mut svc.hosts {
            host.make_ascii_lowercase();
        }
    }
    Ok(doc)
}

/// `(namespace, name)` from registry_file's `…: no service "NAME" in namespace "NS"`.
fn missing_ref(message: &str) -> Option<(&str, &str)> {
    let rest = message.split_once(": no service \"")?.1;
    let (name, rest) = rest.split_once("\" in namespace \"")?;
    let ns = rest.strip_suffix('"')?;
    Some((ns, name))
}

fn declares(base: &Registry, ns: &str, name: &str) -> bool {
    base.services
        .iter()
        .any(|s| s.name == name && s.namespace == ns)
}

/// Gateway routes are applied by name, so each needs a distinct one.
fn check_route_names(source: &str, text: &str, doc: &Registry) -> Result<(), PersistError> {
    let starts = match scan::find_list(text, &["gateway", "routes"]) {
        Some(ListSpot::Block(list)) => list.items.iter().map(|r| r.start).collect(),
        _ => Vec::new(),
    };
    let mut problems = Vec::new();
    for (i, route) in doc.gateway.routes.iter().enumerate() {
        let reason = if route.name.is_empty() {
            "a gateway route needs a name to be applied (routes are replaced by name)".to_string()
        } else if let Some(first) = doc.gateway.routes[..i]
            .iter()
            .position(|r| r.name == route.name)
        {
            format!(
                "route {:?} is already declared at gateway.routes[{first}]",
                route.name
            )
        } else {
            continue;
        };
        let (line, column) = starts.get(i).map_or((1, 1), |&at| position(text, at));
        problems.push(format!(
            "{source}:{line}:{column}: gateway.routes[{i}].name: {reason}"
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(PersistError::Invalid(problems))
    }
}

/// 1-based line and column of the first non-space byte at or after `at`.
fn position(text: &str, at: usize) -> (usize, usize) {
    let line = text[..at].matches('\n').count() + 1;
    let indent = text[at..].len() - text[at..].trim_start_matches(' ').len();
    (line, indent + 1)
}
