//! Writes from `weirctl` to the registry file: merge the request into the file on disk, validate
//! the result whole, splice the changed items into the text (comments and order kept), write it
//! atomically, and publish it so the change is served at once.

mod atomic;
mod document;
mod merge;
mod policy;
mod refine;
mod render;
mod scan;
mod splice;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_refine;

use std::path::Path;

use weir_proxy::{discovery::registry_file, model::Registry};

use crate::state::Store;

pub use merge::Changes;
pub use policy::{find_service, PolicyEdit};

/// What a write did (or, for a dry run, would do).
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Registry generation after the write (the current one for a dry run).
    pub version: u64,
    /// `service/NAME.NS created|configured|unchanged`, `gateway-route/NAME …`.
    pub changes: Vec<String>,
    /// Unified diff of the registry file; empty when the text is unchanged.
    pub diff: String,
    /// Things the operator should know, e.g. that the file was rewritten whole.
    pub warnings: Vec<String>,
}

/// Why a write was refused; nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// The request, or the registry it would produce, is invalid: one
    /// `file:line:column: field: reason` line per problem.
    #[error("{}", .0.join("\n"))]
    Invalid(Vec<String>),
    /// The service named is not in the registry.
    #[error("no service {0:?} in the registry")]
    NotFound(String),
    /// The file on disk does not parse (an edit in progress, perhaps); it is not overwritten.
    #[error("the registry file on disk is invalid; fix it before writing through weirctl:\n{}", .0.join("\n"))]
    FileInvalid(Vec<String>),
    /// Reading or writing the file failed.
    #[error("{path}: {source}")]
    Io {
        /// The registry file.
        path: String,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The registry could not be rendered as YAML that reads back the same (a bug).
    #[error("rendering the registry failed: {0}")]
    Render(String),
}

/// `weirctl apply`: creates or replaces the services and gateway routes `document` declares.
pub async fn apply(
    store: &Store,
    source: &str,
    document: &str,
    dry_run: bool,
) -> Result<Outcome, PersistError> {
    let _writer = store.write_lock.lock().await;
    let (text, base) = read_current(store.path()).await?;
    let changes = document::read(source, document, &base)?;
    commit(store, &text, &base, &changes, dry_run).await
}

/// `weirctl policy set`: changes the named policy fields of one service.
pub async fn set_policy(
    store: &Store,
    edit: &PolicyEdit,
    dry_run: bool,
) -> Result<Outcome, PersistError> {
    if edit.is_empty() {
        return Err(PersistError::Invalid(vec![
            "no policy field to change was given".into(),
        ]));
    }
    let _writer = store.write_lock.lock().await;
    let (text, base) = read_current(store.path()).await?;
    let i = find_service(&base, &edit.service)
        .ok_or_else(|| PersistError::NotFound(edit.service.clone()))?;
    let mut service = base.services[i].clone();
    edit.apply(&mut service.policy).map_err(|problems| {
        let name = service.qualified_name();
        PersistError::Invalid(
            problems
                .iter()
                .map(|p| format!("{name}: policy.{p}"))
                .collect(),
        )
    })?;
    let changes = Changes {
        services: vec![service],
        routes: Vec::new(),
    };
    commit(store, &text, &base, &changes, dry_run).await
}

async fn read_current(path: &Path) -> Result<(String, Registry), PersistError> {
    let io = |source| PersistError::Io {
        path: path.display().to_string(),
        source,
    };
    let text = tokio::fs::read_to_string(path).await.map_err(io)?;
    let registry = registry_file::parse(&path.display().to_string(), &text)
        .map_err(|e| PersistError::FileInvalid(merge::problems(e)))?;
    Ok((text, registry))
}

async fn commit(
    store: &Store,
    text: &str,
    base: &Registry,
    changes: &Changes,
    dry_run: bool,
) -> Result<Outcome, PersistError> {
    let origin = store.path().display().to_string();
    let plan = merge::plan(&origin, text, base, changes)?;
    let diff = if plan.text == text {
        String::new()
    } else {
        similar::TextDiff::from_lines(text, &plan.text)
            .unified_diff()
            .header(&origin, &origin)
            .to_string()
    };
    if dry_run {
        return Ok(Outcome {
            version: store.current().version,
            changes: plan.changes,
            diff,
            warnings: plan.warnings,
        });
    }
    if plan.text != text {
        let path = store.path().to_path_buf();
        let bytes = plan.text.clone().into_bytes();
        tokio::task::spawn_blocking(move || atomic::write(&path, &bytes))
            .await
            .map_err(|e| PersistError::Render(format!("the writer task failed: {e}")))?
            .map_err(|source| PersistError::Io {
                path: origin.clone(),
                source,
            })?;
        tracing::info!(file = %origin, changes = ?plan.changes, "registry file written");
    }
    let version = store.publish(plan.merged);
    Ok(Outcome {
        version,
        changes: plan.changes,
        diff,
        warnings: plan.warnings,
    })
}
