//! The watcher against real files in a temp directory: edits, bad edits, renames, symlink swaps.

use std::{
    fs,
    path::PathBuf,
    sync::Arc,
    time::{Duration, SystemTime},
};

use tokio::sync::watch;

use super::*;

const POLL: Duration = Duration::from_millis(20);

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("weir-watch-{}-{test}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A valid registry with one service called `name`.
fn one_service(name: &str) -> String {
    format!("services:\n  - name: {name}\n")
}

fn names(reg: &Registry) -> Vec<&str> {
    reg.services.iter().map(|s| s.name.as_str()).collect()
}

/// Waits (with a deadline, no sleeping) until the published registry has exactly these services.
async fn published(rx: &mut watch::Receiver<Arc<Registry>>, want: &[&str]) {
    let wait = rx.wait_for(|reg| names(reg) == want);
    let outcome = tokio::time::timeout(Duration::from_secs(5), wait)
        .await
        .map(|r| r.is_ok());
    match outcome {
        Ok(true) => {}
        Ok(false) => panic!("watcher dropped the sender"),
        Err(_) => panic!(
            "{want:?} not published within 5s; have {:?}",
            names(&rx.borrow())
        ),
    }
}

#[test]
fn poll_reports_each_edit_once_and_ignores_rewrites_of_the_same_bytes() {
    let dir = TempDir::new("edits");
    let path = dir.0.join("registry.yaml");
    fs::write(&path, one_service("a")).expect("write");
    let mut file = RegistryFile::with_settle(path.clone(), Duration::ZERO);

    let first = file.poll().expect("first poll reads").expect("valid");
    assert_eq!(names(&first), ["a"]);
    assert!(file.poll().is_none(), "unchanged file");

    fs::write(&path, one_service("a")).expect("rewrite same bytes");
    assert!(file.poll().is_none(), "same content is not a reload");

    fs::write(&path, "services:\n  - name: a\n    endpionts: []\n").expect("write bad");
    let bad = file.poll().expect("bad edit seen").expect_err("rejected");
    assert_eq!(bad.problems().len(), 1, "{bad}");
    assert!(
        bad.to_string().starts_with(&format!(
            "{}:3:5: services[0]: unknown field",
            path.display()
        )),
        "{bad}"
    );
    assert!(file.poll().is_none(), "a rejected edit is reported once");

    fs::write(&path, one_service("bb")).expect("write fixed");
    assert_eq!(
        names(&file.poll().expect("fix seen").expect("valid")),
        ["bb"]
    );
}

#[test]
fn poll_reports_a_missing_file_once_and_reloads_it_when_it_returns() {
    let dir = TempDir::new("missing");
    let path = dir.0.join("registry.yaml");
    fs::write(&path, one_service("a")).expect("write");
    let mut file = RegistryFile::with_settle(path.clone(), Duration::ZERO);
    assert!(file.poll().expect("read").is_ok());

    fs::remove_file(&path).expect("remove");
    let gone = file.poll().expect("removal seen").expect_err("missing");
    assert!(matches!(gone, RegistryError::Read { .. }), "{gone}");
    assert!(
        gone.to_string().starts_with(&path.display().to_string()),
        "{gone}"
    );
    assert!(file.poll().is_none(), "a missing file is reported once");

    fs::write(&path, one_service("a")).expect("write back");
    assert!(
        file.poll().expect("return seen").is_ok(),
        "same bytes as before, still reloaded"
    );
}

/// Polls every 10 ms until the file yields an outcome, for at most `within`.
fn next_outcome(file: &mut RegistryFile, within: Duration) -> Result<Registry, RegistryError> {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(outcome) = file.poll() {
            return outcome;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no outcome within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Stamps the file at `path` as modified at `at`.
fn set_mtime(path: &std::path::Path, at: SystemTime) {
    fs::File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(at))
        .expect("set the file's mtime");
}

#[test]
fn a_file_stamped_in_the_future_stops_being_re_read_once_unchanged_for_the_racy_window() {
    let dir = TempDir::new("future");
    let path = dir.0.join("registry.yaml");
    fs::write(&path, one_service("a")).expect("write");
    set_mtime(&path, SystemTime::now() + Duration::from_secs(3600));
    let mut file = RegistryFile::with_settle(path.clone(), Duration::from_millis(10));
    let first = next_outcome(&mut file, Duration::from_secs(10)).expect("valid");
    assert_eq!(names(&first), ["a"]);
    let read_at = Instant::now();
    assert!(
        file.seen == Seen::Nothing,
        "a stamp this recent is read again"
    );
    // Polled as the watcher does; it settles by its own clock, never by the mtime.
    let deadline = read_at + Duration::from_secs(10);
    while file.seen == Seen::Nothing {
        assert!(file.poll().is_none(), "the same bytes are no reload");
        assert!(Instant::now() < deadline, "still re-read after 10 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        read_at.elapsed() >= RACY,
        "trusted before the racy window passed"
    );
    // An edit still shows: a new stamp is racy again and read.
    fs::write(&path, one_service("bb")).expect("edit");
    let edited = next_outcome(&mut file, Duration::from_secs(10)).expect("valid");
    assert_eq!(names(&edited), ["bb"]);
}

#[test]
fn a_save_that_pauses_between_writes_is_parsed_only_once_it_settles() {
    use std::io::Write;
    let dir = TempDir::new("settle");
    let path = dir.0.join("registry.yaml");
    fs::write(&path, one_service("a")).expect("write");
    set_mtime(&path, SystemTime::now() - Duration::from_secs(60));
    // A settle period long enough that a slow machine cannot outwait it between two lines.
    let mut file = RegistryFile::with_settle(path.clone(), Duration::from_secs(2));
    assert_eq!(
        names(
            &file
                .poll()
                .expect("an old file is read at once")
                .expect("valid")
        ),
        ["a"]
    );

    // Truncate, write a part that is a valid registry by itself, pause, write the rest.
    let mut save = fs::File::create(&path).expect("truncate");
    save.write_all(one_service("b").as_bytes())
        .expect("first part");
    assert!(
        file.poll().is_none(),
        "the first part of a save is not parsed"
    );
    save.write_all(b"  - name: c\n").expect("the rest");
    drop(save);
    assert!(file.poll().is_none(), "a fresh change waits to settle");
    let whole = next_outcome(&mut file, Duration::from_secs(10)).expect("valid");
    assert_eq!(names(&whole), ["b", "c"]);
}

#[test]
fn an_empty_file_mid_save_is_no_error_unless_it_stays_empty() {
    let dir = TempDir::new("empty");
    let path = dir.0.join("registry.yaml");
    fs::write(&path, one_service("a")).expect("write");
    let mut file = RegistryFile::with_settle(path.clone(), Duration::ZERO);
    assert!(file.poll().expect("read").is_ok());

    fs::File::create(&path).expect("truncate");
    assert!(file.poll().is_none(), "an empty file waits for its writer");
    fs::write(&path, one_service("b")).expect("write");
    assert_eq!(names(&file.poll().expect("read").expect("valid")), ["b"]);

    fs::File::create(&path).expect("truncate for good");
    let empty = next_outcome(&mut file, Duration::from_secs(10)).expect_err("empty");
    assert!(
        empty.to_string().contains("the registry is empty"),
        "{empty}"
    );
}

#[tokio::test]
async fn watcher_publishes_an_edit_keeps_the_last_good_registry_through_a_bad_one() {
    let dir = TempDir::new("watch");
    let path = dir.0.join("registry.yaml");
    fs::write(&path, one_service("a")).expect("write");
    let (tx, mut rx) = watch::channel(Arc::new(Registry::default()));
    let _watcher = spawn_watcher(path.clone(), tx, POLL);
    published(&mut rx, &["a"]).await;

    fs::write(&path, one_service("bb")).expect("edit");
    published(&mut rx, &["bb"]).await;

    fs::write(
        &path,
        "services:\n  - name: bb\n    endpoints: [{ address: nowhere }]\n",
    )
    .expect("bad edit");
    fs::write(&path, one_service("ccc")).expect("later good edit");
    // Whatever the watcher made of the bad edit, nothing but the good edit may be published next.
    tokio::time::timeout(Duration::from_secs(5), rx.changed())
        .await
        .expect("in time")
        .expect("sender alive");
    assert_eq!(names(&rx.borrow_and_update()), ["ccc"]);
}

#[tokio::test]
async fn watcher_picks_up_a_file_renamed_over_the_registry() {
    let dir = TempDir::new("rename");
    let path = dir.0.join("registry.yaml");
    fs::write(&path, one_service("a")).expect("write");
    let (tx, mut rx) = watch::channel(Arc::new(Registry::default()));
    let _watcher = spawn_watcher(path.clone(), tx, POLL);
    published(&mut rx, &["a"]).await;

    // What editors do: write a temp file beside the registry, then rename it over.
    let temp = dir.0.join(".registry.yaml.swp");
    fs::write(&temp, one_service("b")).expect("write temp");
    fs::rename(&temp, &path).expect("rename over");
    published(&mut rx, &["b"]).await;
}

#[cfg(unix)]
#[tokio::test]
async fn watcher_follows_a_configmap_style_symlink_swap() {
    use std::os::unix::fs::symlink;
    let dir = TempDir::new("configmap");
    for (version, name) in [("v1", "a"), ("v2", "b")] {
        fs::create_dir(dir.0.join(version)).expect("mkdir");
        fs::write(dir.0.join(version).join("registry.yaml"), one_service(name)).expect("write");
    }
    symlink("v1", dir.0.join("..data")).expect("link data");
    symlink("..data/registry.yaml", dir.0.join("registry.yaml")).expect("link file");
    let (tx, mut rx) = watch::channel(Arc::new(Registry::default()));
    let _watcher = spawn_watcher(dir.0.join("registry.yaml"), tx, POLL);
    published(&mut rx, &["a"]).await;

    symlink("v2", dir.0.join("..data_tmp")).expect("link new data");
    fs::rename(dir.0.join("..data_tmp"), dir.0.join("..data")).expect("swap");
    published(&mut rx, &["b"]).await;
}

#[tokio::test]
async fn watcher_stops_when_every_receiver_is_gone() {
    let dir = TempDir::new("stop");
    let path = dir.0.join("registry.yaml");
    fs::write(&path, one_service("a")).expect("write");
    let (tx, rx) = watch::channel(Arc::new(Registry::default()));
    let watcher = spawn_watcher(path, tx, POLL);
    drop(rx);
    tokio::time::timeout(Duration::from_secs(5), watcher)
        .await
        .expect("stops in time")
        .expect("no panic");
}
