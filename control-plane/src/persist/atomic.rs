//! Replaces a file so that a crash at any moment leaves either the old or the new contents:
//! write a temporary file beside it, fsync it, rename it over, fsync the directory.

use std::{
    fs::{self, File, OpenOptions},
    io::{self, Write},
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
};

/// Atomically replaces `path` with `contents`, keeping its permissions.
pub(crate) fn write(path: &Path, contents: &[u8]) -> io::Result<()> {
    write_with(path, contents, |from, to| fs::rename(from, to))
}

/// [`write`] with the rename step supplied, so a test can make it fail.
pub(crate) fn write_with(
    path: &Path,
    contents: &[u8],
    rename: impl FnOnce(&Path, &Path) -> io::Result<()>,
) -> io::Result<()> {
    // Write through a symlink to its target: replacing the link itself would detach the file
    // from whatever the link was there for.
    let target = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let tmp = temp_path(&dir, &target);
    let result = write_temp(&tmp, &target, contents).and_then(|()| rename(&tmp, &target));
    if let Err(e) = result {
        // The temporary file is all that was touched; the original is intact.
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    // Without this the rename itself may not survive a power loss.
    File::open(&dir)?.sync_all()
}

fn write_temp(tmp: &Path, target: &Path, contents: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new().write(true).create_new(true).open(tmp)?;
    if let Ok(meta) = fs::metadata(target) {
        file.set_permissions(meta.permissions())?;
    }
    file.write_all(contents)?;
    file.sync_all()
}

fn temp_path(dir: &Path, target: &Path) -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "registry".into());
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(".{name}.{}.{seq}.tmp", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_replaces_the_contents_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("registry.yaml");
        fs::write(&path, "old\n").expect("seed");
        write(&path, b"new\n").expect("write");
        assert_eq!(fs::read_to_string(&path).expect("read"), "new\n");
        assert_eq!(fs::read_dir(dir.path()).expect("ls").count(), 1);
    }

    #[test]
    fn a_failure_before_the_rename_leaves_the_original_and_cleans_up() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("registry.yaml");
        fs::write(&path, "old\n").expect("seed");
        let mut seen = None;
        let err = write_with(&path, b"new\n", |tmp, _| {
            seen = Some(fs::read_to_string(tmp));
            Err(io::Error::other("injected: crash before rename"))
        })
        .expect_err("the injected failure surfaces");
        assert!(err.to_string().contains("injected"));
        assert_eq!(seen.and_then(Result::ok).as_deref(), Some("new\n"));
        assert_eq!(fs::read_to_string(&path).expect("read"), "old\n");
        let names: Vec<_> = fs::read_dir(dir.path())
            .expect("ls")
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()
            .expect("names");
        assert_eq!(names, vec![std::ffi::OsString::from("registry.yaml")]);
    }
}
