//! Watches the registry file and publishes each valid edit; an invalid edit is logged with every
//! problem, counted, and the last good registry stays in force.
//!
//! Polling, not inotify: it sees editors that write a temp file and rename it, and Kubernetes
//! ConfigMap updates that swap a symlinked directory, with no platform code. `stat` follows
//! symlinks, so a swap shows up as a new inode.
//!
//! The `stat` each poll and the read after an edit run on the worker thread, not on Tokio's
//! blocking pool. A pool thread lingers for seconds after each job, so with a poll every 250 ms
//! the process always had spare threads, and while a process has a second thread the kernel
//! takes and drops a reference on the socket's file in every system call (`fdget`/`fput`).
//! A registry is a local file of kilobytes (a ConfigMap volume in a pod), read only when its
//! `stat` changes; nginx, too, stats and reads files on its event loop.
//!
//! Two timing rules keep a poll from acting on a file mid-edit. A change is parsed only once
//! it has settled: its mtime is at least [`SETTLE`] old, or the watcher has seen it unchanged
//! that long (a clock that disagrees with the file's). A truncate-then-write save that pauses
//! between writes would otherwise publish the part written so far when that part is valid
//! YAML; an empty file waits [`EMPTY_SETTLE`], as editors truncate before they write. And a
//! file whose mtime was within [`RACY`] of its read is read again next poll ("racy git"): a
//! second edit of the same size in the same timestamp tick leaves every `stat` field as it
//! was, and would be lost; the content hash keeps the re-reads from reloading anything.

#[cfg(test)]
mod tests;

use std::{
    fs::Metadata,
    hash::{DefaultHasher, Hasher},
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use metrics::{counter, describe_counter, describe_gauge, gauge, Unit};
use tokio::{sync::watch, task::JoinHandle, time::MissedTickBehavior};
use tracing::{debug, error, info};

use super::registry_file::{parse, RegistryError};
use crate::model::Registry;

/// How often the file is checked: edits apply well within a second.
pub const DEFAULT_POLL: Duration = Duration::from_millis(250);

/// How long a changed file must stay unchanged before it is parsed.
pub const SETTLE: Duration = Duration::from_millis(100);

/// The same for an empty file, which is what a save looks like between truncate and write.
pub const EMPTY_SETTLE: Duration = Duration::from_secs(1);

/// A file read while its mtime was this recent is read again: the same `stat` could hide a
/// later edit in the same timestamp tick (coarse on every filesystem, 1-2 s on some).
pub const RACY: Duration = Duration::from_secs(1);

const RELOADS: &str = "weir_registry_reloads_total";
const LAST_SUCCESS: &str = "weir_registry_last_reload_success";
const LAST_TIMESTAMP: &str = "weir_registry_last_reload_timestamp_seconds";

/// Registers the descriptions of the registry-file metrics with the installed recorder.
pub fn describe_metrics() {
    describe_counter!(RELOADS, "Registry file reloads by result (success, error).");
    describe_gauge!(
        LAST_SUCCESS,
        "1 if the last registry file reload succeeded, 0 if it was rejected."
    );
    describe_gauge!(
        LAST_TIMESTAMP,
        Unit::Seconds,
        "Unix time of the last registry file reload, successful or not."
    );
}

/// Checks `path` every `poll` and publishes each new valid registry on `tx` (only when it differs
/// from the current one, so comment edits wake no one). Ends when every receiver is gone.
pub fn spawn_watcher(
    path: PathBuf,
    tx: watch::Sender<Arc<Registry>>,
    poll: Duration,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut file = RegistryFile::new(path);
        let mut tick = tokio::time::interval(poll);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if tx.is_closed() {
                debug!(path = %file.path().display(), "no one reads the registry any more; watcher stops");
                return;
            }
            if let Some(outcome) = file.poll() {
                publish(file.path(), &tx, outcome);
            }
        }
    })
}

/// The registry file as last seen, so a poll can tell a real edit from no change.
pub struct RegistryFile {
    path: PathBuf,
    origin: String,
    seen: Seen,
    /// Hash of the last content handed to the parser: a touch or a rewrite with the same bytes
    /// is not a reload. Cleared when the file goes away, so its return is reloaded.
    hash: Option<u64>,
    /// See [`SETTLE`]; the tests shorten or lengthen it.
    settle: Duration,
    /// A change not yet settled, and when this watcher first saw it.
    pending: Option<(Stamp, Instant)>,
    /// A stamp read while it looked recent (see [`RACY`]), and when this watcher first read it:
    /// once unchanged for `RACY` by this watcher's clock, the tick it was written in is over
    /// whatever the file's mtime says, so a file stamped in the future is not re-read forever.
    racy: Option<(Stamp, Instant)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Nothing read yet, or a read too close to the file's mtime to trust its stamp: read next.
    Nothing,
    Missing,
    File(Stamp),
}

/// What `stat` says about the file; any difference means it may have changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    /// Device and inode: a rename over the path or a symlink swap changes them.
    node: (u64, u64),
    /// Status change time: catches a chmod that makes an unreadable file readable.
    changed: (i64, i64),
}

impl Stamp {
    fn of(meta: &Metadata) -> Self {
        #[cfg(unix)]
        let (node, changed) = {
            use std::os::unix::fs::MetadataExt;
            ((meta.dev(), meta.ino()), (meta.ctime(), meta.ctime_nsec()))
        };
        #[cfg(not(unix))]
        let (node, changed) = ((0, 0), (0, 0));
        Stamp {
            len: meta.len(),
            modified: meta.modified().ok(),
            node,
            changed,
        }
    }
}

impl RegistryFile {
    /// Nothing seen yet: the first poll reads the file.
    pub fn new(path: PathBuf) -> Self {
        Self::with_settle(path, SETTLE)
    }

    /// As [`RegistryFile::new`], with a settle period other than [`SETTLE`].
    fn with_settle(path: PathBuf, settle: Duration) -> Self {
        let origin = path.display().to_string();
        RegistryFile {
            path,
            origin,
            seen: Seen::Nothing,
            hash: None,
            settle,
            pending: None,
            racy: None,
        }
    }

    /// Whether a read of `stamp` must be repeated next poll: its mtime is within [`RACY`] (or
    /// ahead of this host's clock) and this watcher has not yet seen it unchanged that long.
    fn still_racy(&mut self, stamp: Stamp) -> bool {
        if age(stamp) >= RACY {
            return false;
        }
        match self.racy {
            Some((racy, since)) if racy == stamp => since.elapsed() < RACY,
            _ => {
                self.racy = Some((stamp, Instant::now()));
                true
            }
        }
    }

    /// Whether a change has stayed put long enough to parse (see [`SETTLE`]); remembers it if
    /// not, so the watcher's own clock can settle it when the file's mtime is off.
    fn settled(&mut self, stamp: Stamp) -> bool {
        let need = if stamp.len == 0 {
            self.settle.max(EMPTY_SETTLE)
        } else {
            self.settle
        };
        if age(stamp) >= need {
            return true;
        }
        match self.pending {
            Some((pending, since)) if pending == stamp => since.elapsed() >= need,
            _ => {
                self.pending = Some((stamp, Instant::now()));
                false
            }
        }
    }

    /// The watched path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Checks the file once. `None`: nothing new since the last call (including a failure already
    /// reported, so a missing file is reported once, not every poll).
    pub fn poll(&mut self) -> Option<Result<Registry, RegistryError>> {
        let stamp = match std::fs::metadata(&self.path) {
            Ok(meta) => Stamp::of(&meta),
            Err(source) => {
                if self.seen == Seen::Missing {
                    return None;
                }
                self.seen = Seen::Missing;
                self.hash = None;
                return Some(Err(RegistryError::Read {
                    path: self.origin.clone(),
                    source,
                }));
            }
        };
        if self.seen == Seen::File(stamp) || !self.settled(stamp) {
            return None;
        }
        let read = std::fs::read(&self.path);
        // A writer still at work: parse the file next tick rather than half of it now.
        match std::fs::metadata(&self.path) {
            Ok(meta) if Stamp::of(&meta) == stamp => {}
            _ => return None,
        }
        self.pending = None;
        self.seen = if self.still_racy(stamp) {
            Seen::Nothing
        } else {
            Seen::File(stamp)
        };
        let bytes = match read {
            Ok(bytes) => bytes,
            Err(source) => {
                // Reported once, not at every racy re-read.
                self.seen = Seen::File(stamp);
                self.hash = None;
                return Some(Err(RegistryError::Read {
                    path: self.origin.clone(),
                    source,
                }));
            }
        };
        let mut hasher = DefaultHasher::new();
        hasher.write(&bytes);
        let hash = hasher.finish();
        if self.hash.replace(hash) == Some(hash) {
            return None;
        }
        Some(match String::from_utf8(bytes) {
            Ok(text) => parse(&self.origin, &text),
            Err(e) => {
                let source = std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error());
                Err(RegistryError::Read {
                    path: self.origin.clone(),
                    source,
                })
            }
        })
    }
}

/// How long ago the file was modified by its mtime; zero when unknown or in the future.
fn age(stamp: Stamp) -> Duration {
    stamp
        .modified
        .and_then(|m| SystemTime::now().duration_since(m).ok())
        .unwrap_or(Duration::ZERO)
}

/// Publishes a good registry or reports a bad one; either way records the outcome in metrics.
fn publish(
    path: &Path,
    tx: &watch::Sender<Arc<Registry>>,
    outcome: Result<Registry, RegistryError>,
) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    gauge!(LAST_TIMESTAMP).set(now);
    match outcome {
        Ok(registry) => {
            let (services, gateway_routes) =
                (registry.services.len(), registry.gateway.routes.len());
            let changed = tx.send_if_modified(|current| {
                let changed = **current != registry;
                if changed {
                    *current = Arc::new(registry);
                }
                changed
            });
            counter!(RELOADS, "result" => "success").increment(1);
            gauge!(LAST_SUCCESS).set(1.0);
            info!(path = %path.display(), services, gateway_routes, changed, "registry file loaded");
        }
        Err(e) => {
            counter!(RELOADS, "result" => "error").increment(1);
            gauge!(LAST_SUCCESS).set(0.0);
            match &e {
                RegistryError::Read { .. } => error!("{e}; keeping the last good registry"),
                RegistryError::Invalid(problems) => {
                    let count = problems.len();
                    error!(path = %path.display(), count, "registry file rejected; keeping the last good registry");
                    for problem in problems {
                        error!("{problem}");
                    }
                }
            }
        }
    }
}
