//! Skip a test whose outside tool or privilege is missing, or fail it when CI demands everything.
//!
//! A developer without nginx still gets a green `cargo test`; CI sets `WEIR_TEST_REQUIRE_ALL=1`
//! so a missing tool can never turn into a silently skipped suite.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// True when `WEIR_TEST_REQUIRE_ALL=1`: every skip becomes a failure.
pub fn require_all() -> bool {
    std::env::var("WEIR_TEST_REQUIRE_ALL").is_ok_and(|v| v == "1")
}

/// The running test's name: libtest names each test thread after its test, and `#[tokio::test]`
/// runs the body on that thread.
pub fn current_test() -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" => name.to_owned(),
        _ => "<test>".to_owned(),
    }
}

/// Report a skip: prints `SKIP <test>: <why>` to stderr and returns false, or panics with the same
/// message under `WEIR_TEST_REQUIRE_ALL=1`.
pub fn skip(why: &str) -> bool {
    let msg = format!("SKIP {}: {why}", current_test());
    if require_all() {
        panic!("{msg} (WEIR_TEST_REQUIRE_ALL=1 forbids skipping)");
    }
    eprintln!("{msg}");
    false
}

/// True when `name` is an executable on `PATH` (or an existing path); otherwise skips.
pub fn require_tool(name: &str) -> bool {
    if tool_path(name).is_some() {
        return true;
    }
    skip(&format!(
        "`{name}` is not installed (tests/run installs it)"
    ))
}

/// True when the process runs as root (netns, iptables, setpriv); otherwise skips.
pub fn require_root() -> bool {
    // /proc/self is owned by the effective uid, which avoids an unsafe getuid() call.
    let euid = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
    if euid == Some(0) {
        return true;
    }
    skip("needs root (network namespaces, iptables)")
}

/// True when the test Python (see [`crate::grpc::python`]) can import `grpc` and `grpc_tools`.
pub fn require_python_grpc() -> bool {
    python_imports("grpc, grpc_tools", "grpcio grpcio-tools")
}

/// True when the test Python can import `websockets` and `h2` (the WebSocket tools in
/// `tests/ws/`).
pub fn require_python_ws() -> bool {
    python_imports("websockets, h2", "websockets h2")
}

/// True when the test Python can `import {modules}`; otherwise skips, naming the pip packages.
fn python_imports(modules: &str, packages: &str) -> bool {
    let python = crate::grpc::python();
    let ok = Command::new(&python)
        .args(["-c", &format!("import {modules}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok || skip(&format!(
        "`{python}` cannot import {modules} (pip install {packages})"
    ))
}

/// True when the app's Python ([`crate::grpc::APP_PYTHON`]), run as the app's uid
/// ([`crate::sidecar::APP_UID`]), can import `grpc` and `grpc_tools` and read `tests/grpc/`:
/// a per-user install (pyenv, `pip --user` under /root) does not count. Otherwise skips.
pub fn require_app_python_grpc() -> bool {
    let python = crate::grpc::APP_PYTHON;
    let uid = crate::sidecar::APP_UID.to_string();
    let client = crate::grpc::grpc_dir().join("client.py");
    let check = format!(
        "import grpc, grpc_tools; open({:?}).close()",
        client.to_string_lossy()
    );
    let ok = tool_path("setpriv").is_some_and(|setpriv| {
        Command::new(setpriv)
            .args(["--reuid", &uid, "--regid", &uid, "--clear-groups", "--"])
            .args([python, "-c", &check])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if ok {
        return true;
    }
    skip(&format!(
        "`{python}` as uid {uid} cannot import grpc + grpc_tools or read {} \
         (tests/run pip-installs grpcio grpcio-tools for it)",
        client.display()
    ))
}

/// True when this process may hold `n` open files, raising its soft limit towards the hard one
/// when needed (processes it starts afterwards inherit the limit); otherwise skips.
pub fn require_open_files(n: u64) -> bool {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct it is given.
    #[allow(unsafe_code)]
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return skip("cannot read the open-files limit");
    }
    if lim.rlim_cur >= n {
        return true;
    }
    if lim.rlim_max >= n {
        let want = libc::rlimit {
            rlim_cur: n,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit only reads the struct it is given.
        #[allow(unsafe_code)]
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
            return true;
        }
    }
    skip(&format!(
        "needs {n} open files; the limit is {} (hard {})",
        lim.rlim_cur, lim.rlim_max
    ))
}

/// Where `name` lives: `PATH` first, then the sbin directories, which a non-root `PATH` often
/// lacks although nginx and ip live there. Spawn tools through this so both agree.
pub fn tool_path(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name)).filter(|p| p.is_file());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let extra = ["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from);
    std::env::split_paths(&path)
        .chain(extra)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// [`tool_path`], panicking when absent: call it after `require!(tool ...)`.
pub fn tool(name: &str) -> PathBuf {
    tool_path(name).unwrap_or_else(|| panic!("`{name}` is not installed (tests/run installs it)"))
}

/// Return from the test unless every requirement holds:
/// `require!(tool "nginx", tool "promtool", root, python_grpc);` (`python_ws`: websockets and
/// h2 for `tests/ws/`; `app_python_grpc`: the same
/// for Python run as the app inside a network namespace; `open_files N`: room for N open files)
///
/// Each missing requirement prints `SKIP <test>: <why>` (or panics under
/// `WEIR_TEST_REQUIRE_ALL=1`); the first missing one ends the test.
#[macro_export]
macro_rules! require {
    ($($kind:ident $($arg:expr)?),+ $(,)?) => {
        $( if !$crate::require!(@one $kind $($arg)?) { return; } )+
    };
    (@one tool $name:expr) => { $crate::skip::require_tool($name) };
    (@one open_files $n:expr) => { $crate::skip::require_open_files($n) };
    (@one root) => { $crate::skip::require_root() };
    (@one python_grpc) => { $crate::skip::require_python_grpc() };
    (@one python_ws) => { $crate::skip::require_python_ws() };
    (@one app_python_grpc) => { $crate::skip::require_app_python_grpc() };
}
