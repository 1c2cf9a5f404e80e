//! Start-up refuses an environment it cannot read whole: exit code 2 and every bad variable
//! named, instead of running on a default the operator did not ask for.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs the proxy with `env` on top of a registry path and returns how it exited.
fn start(env: &[(&str, &OsStr)]) -> Output {
    let mut cmd = Command::new(weir_tests::proxy::proxy_bin());
    cmd.env_clear()
        .env("WEIR_PROXY_REGISTRY", "/nonexistent/registry.yaml")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("the proxy binary runs");
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the proxy did not exit within 10 s on a bad environment");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("output")
}

#[test]
fn an_invalid_log_filter_or_a_non_utf8_value_stops_start_up_naming_the_variable() {
    let out = start(&[
        ("WEIR_PROXY_LOG", OsStr::new("weir=verbose")),
        ("WEIR_PROXY_SHUTDOWN_GRACE", OsStr::from_bytes(b"5s\xff")),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("WEIR_PROXY_LOG=\"weir=verbose\": "),
        "{stderr}"
    );
    assert!(
        stderr.contains("WEIR_PROXY_SHUTDOWN_GRACE: not valid UTF-8"),
        "{stderr}"
    );
}
