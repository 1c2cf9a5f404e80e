//! The registry watcher on a filesystem that stamps files in whole seconds (ext4 with 128-byte
//! inodes, loop-mounted; what NFS, FAT and pre-6.13 kernels' coarse clocks give a pod): an
//! edit of the same size in the same second as the watcher's last read must still apply.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use weir_tests::http_client::get;
use weir_tests::tmp::TempDir;
use weir_tests::{poll_until, require, TestBackend, WeirProxy};

use crate::gateway::{registry, service};
use crate::registry::{route_to, APPLY_WITHIN};

/// A loop-mounted ext4 image whose inodes have no room for sub-second timestamps; unmounted on
/// drop.
struct CoarseFs {
    _dir: TempDir,
    mnt: PathBuf,
}

impl CoarseFs {
    /// Makes and mounts the filesystem, or says why it cannot.
    fn mount() -> Result<CoarseFs, String> {
        let dir = TempDir::new("coarse-fs");
        let image = dir.join("fs.img");
        let mnt = dir.join("mnt");
        std::fs::create_dir(&mnt).map_err(|e| format!("mkdir: {e}"))?;
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(8 << 20))
            .map_err(|e| format!("image: {e}"))?;
        let image = image.to_string_lossy().into_owned();
        let mnt_arg = mnt.to_string_lossy().into_owned();
        run(&["mkfs.ext4", "-q", "-F", "-I", "128", &image])?;
        run(&["mount", "-o", "loop", &image, &mnt_arg])?;
        Ok(CoarseFs { _dir: dir, mnt })
    }

    fn path(&self) -> &Path {
        &self.mnt
    }
}

impl Drop for CoarseFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
    }
}

/// Runs `argv` to completion; its stderr is the error.
fn run(argv: &[&str]) -> Result<(), String> {
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .map_err(|e| format!("{}: {e}", argv[0]))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{argv:?}: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

/// The wall clock's position within its second.
fn into_second() -> Duration {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
    Duration::from_nanos(now.subsec_nanos().into())
}

#[tokio::test]
async fn an_edit_of_the_same_size_in_the_second_of_the_last_read_applies_on_a_coarse_filesystem() {
    require!(root, tool "mkfs.ext4", tool "mount");
    let fs = match CoarseFs::mount() {
        Ok(fs) => fs,
        Err(why) => {
            weir_tests::skip::skip(&format!("cannot loop-mount an ext4 image: {why}"));
            return;
        }
    };
    let (a, b) = tokio::join!(TestBackend::start("a"), TestBackend::start("b"));
    // Service names of one length: the two registries differ in bytes, not in size.
    let reg = |to: &str| {
        registry(
            &[service("aa", &[a.addr]), service("bb", &[b.addr])],
            &route_to(to),
        )
    };
    assert_eq!(reg("aa").len(), reg("bb").len());
    let path = fs.path().join("registry.yaml");
    std::fs::write(&path, reg("aa")).expect("write the registry");
    let proxy = WeirProxy::builder()
        .timed()
        .gateway(true)
        .env("WEIR_PROXY_REGISTRY", path.to_string_lossy())
        .env("WEIR_PROXY_REGISTRY_POLL", "20ms")
        .start()
        .await;
    let gw = proxy.gateway.expect("the builder asked for a gateway");
    let serving = |name: &'static str| async move {
        let what = format!("the gateway to route to {name}");
        poll_until(APPLY_WITHIN, &what, || async {
            let reply = get(gw, "gw.test", "/").await;
            (reply.header("x-backend") == Some(name)).then_some(())
        })
        .await
    };
    serving("a").await;

    for round in 0..3 {
        // Start early in a second, so the watcher reads the first edit and the second edit
        // lands within that same second: same size, inode, mtime and ctime as the first.
        poll_until(Duration::from_secs(2), "the start of a second", || async {
            (into_second() < Duration::from_millis(100)).then_some(())
        })
        .await;
        std::fs::write(&path, reg("bb")).expect("edit to bb");
        serving("b").await;
        std::fs::write(&path, reg("aa")).expect("edit back to aa");
        let late = into_second();
        serving("a").await;
        eprintln!("round {round}: second edit written {late:?} into its second");
    }
}
