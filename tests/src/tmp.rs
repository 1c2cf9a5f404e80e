//! A temporary directory removed on drop (kept when `WEIR_TEST_KEEP_TMP=1`, to read logs after).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh directory under the system temp dir, named `weir-<tag>-<pid>-<n>`.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates the directory; `tag` names what it is for (`proxy`, `nginx`, ...).
    pub fn new(tag: &str) -> TempDir {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("weir-{tag}-{}-{n}", std::process::id());
        let path = std::env::temp_dir().join(name);
        // A leftover from a crashed run with a recycled pid must not leak into this one.
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("create temp dir {}: {e}", path.display()));
        TempDir { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `path()/name`.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var("WEIR_TEST_KEEP_TMP").is_ok_and(|v| v == "1") {
            eprintln!("kept {}", self.path.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
