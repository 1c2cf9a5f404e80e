//! CPU levels: a build for x86-64-v3 (the benchmark's, `tests/perf/lib.sh`) carries its level so
//! an older CPU's loader refuses it, and the proxy the tests build runs on a pre-Haswell CPU.
//!
//! The older and newer CPUs are qemu's user-mode models: Nehalem (2008, x86-64-v2, no AVX2 or
//! BMI) and Haswell (2013, the first with all of x86-64-v3).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use weir_tests::{require, tmp::TempDir};

const HELLO: &str = "fn main() { println!(\"ran\"); }\n";

/// What `tests/perf/lib.sh`'s `target_cpu_rustflags` gives for `WEIR_TARGET_CPU=level`.
fn rustflags(level: &str) -> Vec<String> {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("perf/lib.sh");
    let out = Command::new("bash")
        .args(["-c", ". \"$1\" && target_cpu_rustflags", "bash"])
        .arg(&lib)
        .env("WEIR_TARGET_CPU", level)
        .output()
        .expect("bash runs");
    assert!(out.status.success(), "lib.sh: {}", text(&out.stderr));
    text(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Compiles [`HELLO`] with `flags` into `dir`, as the benchmark compiles weir-proxy.
fn hello(dir: &TempDir, name: &str, flags: &[String]) -> PathBuf {
    let src = dir.join("hello.rs");
    std::fs::write(&src, HELLO).expect("write hello.rs");
    let bin = dir.join(name);
    let out = Command::new("rustc")
        .args(["-O", "--edition", "2021"])
        .args(flags)
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .output()
        .expect("rustc runs");
    assert!(
        out.status.success(),
        "rustc {flags:?}: {}",
        text(&out.stderr)
    );
    bin
}

/// The `x86 ISA needed` line of the binary's ELF notes, if any.
fn isa_needed(bin: &Path) -> Option<String> {
    let out = Command::new("readelf")
        .arg("-n")
        .arg(bin)
        .output()
        .expect("readelf runs");
    assert!(out.status.success(), "readelf: {}", text(&out.stderr));
    text(&out.stdout).lines().find_map(|l| {
        l.split_once("x86 ISA needed:")
            .map(|(_, v)| v.trim().to_owned())
    })
}

/// Asserts that `bin` names no x86-64-v level (at most the baseline).
fn assert_no_level(bin: &Path) {
    let needed = isa_needed(bin);
    assert!(
        needed.as_deref().is_none_or(|v| !v.contains("x86-64-v")),
        "{}: {needed:?}",
        bin.display()
    );
}

/// Runs `bin` on qemu's model of `cpu`.
fn on_cpu(cpu: &str, bin: &Path, env: &[(&str, &str)]) -> Output {
    Command::new("qemu-x86_64")
        .args(["-cpu", cpu])
        .arg(bin)
        .envs(env.iter().copied())
        .output()
        .expect("qemu-x86_64 runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn x86_64_host() -> bool {
    if cfg!(target_arch = "x86_64") {
        return true;
    }
    weir_tests::skip::skip("CPU levels are x86-64's; this host is not")
}

#[test]
fn a_v3_build_names_its_level_and_a_pre_haswell_loader_refuses_it() {
    require!(tool "rustc", tool "readelf", tool "qemu-x86_64");
    if !x86_64_host() {
        return;
    }
    let dir = TempDir::new("cpu-level");
    let flags = rustflags("x86-64-v3");
    assert!(
        flags.iter().any(|f| f == "-Ctarget-cpu=x86-64-v3"),
        "{flags:?}"
    );
    let v3 = hello(&dir, "hello-v3", &flags);
    assert_eq!(
        isa_needed(&v3).as_deref(),
        Some("x86-64-baseline, x86-64-v3")
    );

    let old = on_cpu("Nehalem", &v3, &[]);
    assert_eq!(old.status.code(), Some(127), "{old:?}");
    assert!(
        text(&old.stderr).contains("CPU ISA level is lower than required"),
        "{}",
        text(&old.stderr)
    );
    assert_eq!(text(&old.stdout), "", "nothing of the program ran");

    let new = on_cpu("Haswell", &v3, &[]);
    assert!(new.status.success(), "{new:?}");
    assert_eq!(text(&new.stdout), "ran\n");
}

#[test]
fn a_baseline_build_names_no_level_and_runs_on_a_pre_haswell_cpu() {
    require!(tool "rustc", tool "readelf", tool "qemu-x86_64");
    if !x86_64_host() {
        return;
    }
    let dir = TempDir::new("cpu-level");
    let flags = rustflags("x86-64");
    assert_eq!(flags, ["-Ctarget-cpu=x86-64"]);
    let base = hello(&dir, "hello-base", &flags);
    assert_no_level(&base);
    let old = on_cpu("Nehalem", &base, &[]);
    assert!(old.status.success(), "{old:?}");
    assert_eq!(text(&old.stdout), "ran\n");
}

#[test]
fn the_proxy_the_tests_build_starts_on_a_pre_haswell_cpu() {
    require!(tool "readelf", tool "qemu-x86_64");
    if !x86_64_host() {
        return;
    }
    let bin = weir_tests::proxy::proxy_bin();
    assert_no_level(&bin);
    // A configuration error is the quickest way through start-up to a clean exit: the loader,
    // the allocator's initialisation and `main` all ran.
    let out = on_cpu("Nehalem", &bin, &[("WEIR_PROXY_WORKERS", "abc")]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        text(&out.stderr).contains("WEIR_PROXY_WORKERS=\"abc\": expected a whole number"),
        "{}",
        text(&out.stderr)
    );
}
