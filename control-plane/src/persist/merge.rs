//! Merges requested items into the registry and produces the new file text: spliced in place when
//! possible, re-rendered whole otherwise, and in both cases read back and compared with the merged
//! registry before it may be written.

use weir_proxy::{
    discovery::registry_file::{self, RegistryError},
    model::{Registry, Route, Service},
};

use super::{render, splice, PersistError};

/// Items to create or replace: services by (name, namespace), gateway routes by name.
#[derive(Debug, Default, Clone)]
pub struct Changes {
    /// Services, each replacing the one with its name and namespace, or added.
    pub services: Vec<Service>,
    /// Gateway routes, each replacing the one with its name, or added.
    pub routes: Vec<Route>,
}

/// The outcome of merging, before anything is written.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The new file text (equal to the old one when nothing changed).
    pub text: String,
    /// What `text` parses to.
    pub merged: Registry,
    /// `service/NAME.NS created|configured|unchanged`, `gateway-route/NAME …`.
    pub changes: Vec<String>,
    /// Things the operator should know (the file was re-rendered whole).
    pub warnings: Vec<String>,
}

/// Merges `changes` into `base` (what `text` parses to); `origin` names the file in problems.
pub(crate) fn plan(
    origin: &str,
    text: &str,
    base: &Registry,
    changes: &Changes,
) -> Result<Plan, PersistError> {
    let mut merged = base.clone();
    let mut touched = splice::Touched::default();
    let mut lines = Vec::new();
    for svc in &changes.services {
        let name = format!("service/{}", svc.qualified_name());
        let at = merged
            .services
            .iter()
            .position(|s| s.name == svc.name && s.namespace == svc.namespace);
        let verb = upsert(
            &mut merged.services,
            at,
            svc,
            &mut touched.services_replaced,
        );
        if verb == "created" {
            touched.services_added.push(merged.services.len() - 1);
        }
        lines.push(format!("{name} {verb}"));
    }
    for route in &changes.routes {
        let routes = &mut merged.gateway.routes;
        let at = routes.iter().position(|r| r.name == route.name);
        let verb = upsert(routes, at, route, &mut touched.routes_replaced);
        if verb == "created" {
            touched.routes_added.push(merged.gateway.routes.len() - 1);
        }
        lines.push(format!("gateway-route/{} {verb}", route.name));
    }
    if merged == *base {
        return Ok(Plan {
            text: text.to_string(),
            merged,
            changes: lines,
            warnings: Vec::new(),
        });
    }
    let (text, warnings) = write_text(origin, text, base, &merged, &touched)?;
    Ok(Plan {
        text,
        merged,
        changes: lines,
        warnings,
    })
}

fn upsert<T: Clone + PartialEq>(
    list: &mut Vec<T>,
    at: Option<usize>,
    item: &T,
    replaced: &mut Vec<usize>,
) -> &'static str {
    match at {
        Some(i) if list[i] == *item => "unchanged",
        Some(i) => {
            list[i] = item.clone();
            if !replaced.contains(&i) {
                replaced.push(i);
            }
            "configured"
        }
        None => {
            list.push(item.clone());
            "created"
        }
    }
}

fn write_text(
    origin: &str,
    text: &str,
    base: &Registry,
    merged: &Registry,
    touched: &splice::Touched,
) -> Result<(String, Vec<String>), PersistError> {
    let mut spliced_problems = None;
    let mut why_not = "";
    // Key by key first; a whole-item render where that does not read back the same.
    for grain in [splice::Grain::Keys, splice::Grain::Item] {
        why_not = match splice::splice(text, base, merged, touched, grain) {
            Ok(spliced) => match registry_file::parse(origin, &spliced) {
                Ok(reg) if reg == *merged => return Ok((spliced, Vec::new())),
                Ok(_) => "the edited text did not read back as the merged registry",
                Err(e) => {
                    spliced_problems.get_or_insert_with(|| problems(e));
                    "the edited text did not parse"
                }
            },
            Err(splice::Unspliceable::Layout(why)) => why,
            Err(splice::Unspliceable::Render(e)) => return Err(e),
        };
        tracing::debug!(file = origin, ?grain, reason = why_not, "splice rejected");
    }
    let whole = render::whole(merged)?;
    match registry_file::parse(origin, &whole) {
        Ok(reg) if reg == *merged => {
            tracing::warn!(
                file = origin,
                reason = why_not,
                "registry file re-rendered whole"
            );
            let warning = format!(
                "{origin} could not be edited in place ({why_not}); it was rewritten whole, \
                 so its comments and layout were not kept"
            );
            Ok((whole, vec![warning]))
        }
        Ok(_) => Err(PersistError::Render(
            "the rendered registry does not read back the same".into(),
        )),
        // The merged registry itself is invalid; the spliced text's positions match the
        // operator's file best, so prefer its problems.
        Err(e) => Err(PersistError::Invalid(
            spliced_problems.unwrap_or_else(|| problems(e)),
        )),
    }
}

/// One `file:line:column: field: reason` line per problem.
pub(crate) fn problems(e: RegistryError) -> Vec<String> {
    match e {
        RegistryError::Invalid(ps) => ps.iter().map(|p| p.to_string()).collect(),
        other => vec![other.to_string()],
    }
}
