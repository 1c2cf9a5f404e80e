//! Every `weirctl` command against a live weir-control with a proxy reporting to it: output,
//! exit codes, and writes that reach the registry file (comments kept) and the proxies.

use std::time::Duration;

use tokio::io::AsyncBufReadExt;

use weir_tests::control::{weirctl, WeirControl};
use weir_tests::http_client::get;
use weir_tests::{free_addr, poll_until, TestBackend};

use crate::control::control_proxy;
use crate::registry::SteadyTraffic;

fn registry(a: std::net::SocketAddr, b: std::net::SocketAddr) -> String {
    format!(
        "# the team's registry: keep this comment
services:
  - name: web   # the storefront
    hosts: [web.test]
    endpoints:
      - address: \"{a}\"
      - address: \"{b}\"
        weight: 2
  - name: api
    namespace: shop
    endpoints: []
gateway:
  routes:
    - name: main
      backendRefs: [{{ name: web }}]
"
    )
}

#[tokio::test]
async fn weirctl_reads_the_mesh_and_writes_the_registry() {
    let (a, b) = tokio::join!(TestBackend::start("a"), TestBackend::start("b"));
    let cp = WeirControl::start(&registry(a.addr, b.addr)).await;
    let (_proxy, gw) = control_proxy(&cp).await;
    for _ in 0..20 {
        assert_eq!(get(gw, "web.test", "/").await.status, 200);
    }

    // get services: a table with a header and one row per service.
    let out = cp.weirctl(&["get", "services"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[0].starts_with("NAME"), "{}", out.stdout);
    assert!(lines
        .iter()
        .any(|l| l.starts_with("web ") && l.contains("default")));
    assert!(lines
        .iter()
        .any(|l| l.starts_with("api ") && l.contains("shop")));

    // -o json is data.
    let out = cp.weirctl(&["get", "services", "-o", "json"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("valid JSON");
    assert!(json.to_string().contains("\"web\""), "{json}");

    // get endpoints: both addresses with their weights.
    let out = cp.weirctl(&["get", "endpoints", "web"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    let row_b = out
        .stdout
        .lines()
        .find(|l| l.contains(&b.addr.to_string()))
        .unwrap_or_else(|| panic!("b listed: {}", out.stdout));
    assert!(row_b.contains('2'), "b's weight: {row_b}");
    assert!(out.stdout.contains(&a.addr.to_string()));

    // describe: live endpoint state as the proxy reports it.
    let out = poll_until(
        Duration::from_secs(5),
        "describe to show live state",
        || async {
            let out = cp.weirctl(&["describe", "service", "web"]).await;
            (out.code == 0 && out.stdout.contains("ready")).then_some(out)
        },
    )
    .await;
    assert!(out.stdout.contains(&a.addr.to_string()), "{}", out.stdout);
    let out = cp.weirctl(&["describe", "service", "nope"]).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("nope"), "{out:?}");

    // apply --dry-run: a diff, nothing written.
    let before = cp.read_registry();
    let doc = "services:\n  - name: extra\n    endpoints:\n      - address: \"127.0.0.1:9\"\n";
    let out = cp
        .weirctl_stdin(&["apply", "-f", "-", "--dry-run"], doc)
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("extra"), "{}", out.stdout);
    assert!(out.stdout.contains("+"), "a diff: {}", out.stdout);
    assert_eq!(cp.read_registry(), before, "a dry run writes nothing");

    // apply: written, comments kept, served.
    let out = cp.weirctl_stdin(&["apply", "-f", "-"], doc).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("created"), "{}", out.stdout);
    let after = cp.read_registry();
    assert!(after.contains("# the team's registry: keep this comment"));
    assert!(after.contains("# the storefront"));
    assert!(after.contains("name: extra"));
    let out = cp.weirctl(&["get", "services"]).await;
    assert!(
        out.stdout.lines().any(|l| l.starts_with("extra ")),
        "{}",
        out.stdout
    );

    // apply of an invalid document: refused with its location, nothing written.
    let bad = "services:\n  - name: broken\n    endpoints:\n      - address: 127.0.0.1:80800\n";
    let out = cp.weirctl_stdin(&["apply", "-f", "-"], bad).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("4:18"), "line:column named: {out:?}");
    assert_eq!(cp.read_registry(), after);

    // policy set: one field changed in the file.
    let out = cp
        .weirctl(&[
            "policy",
            "set",
            "web",
            "--timeout",
            "2s",
            "--retry-budget",
            "0.2",
        ])
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    let text = cp.read_registry();
    assert!(text.contains("timeout: 2s"), "{text}");
    assert!(text.contains("ratio: 0.2"), "{text}");
    assert!(text.contains("# the storefront"), "{text}");

    // check: everything fine.
    let out = cp.weirctl(&["check"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains('✓') && !out.stdout.contains('✗'),
        "{}",
        out.stdout
    );

    // stat: live gateway traffic to web, from the proxy's metrics.
    let traffic = SteadyTraffic::start(gw, 2, "/");
    let out = poll_until(
        Duration::from_secs(10),
        "stat to show web's traffic",
        || async {
            let out = cp.weirctl(&["stat", "web", "--window", "30s"]).await;
            assert_eq!(out.code, 0, "{out:?}");
            out.stdout
                .lines()
                .any(|l| {
                    l.starts_with("web.default") && l.contains("main") && l.contains("100.00%")
                })
                .then_some(out)
        },
    )
    .await;
    eprintln!("{}", out.stdout);

    // stat --watch reprints until interrupted.
    let mut watch = tokio::process::Command::new(weir_tests::control::weirctl_bin())
        .args(["stat", "web", "--watch", "--interval", "100ms"])
        .env("WEIR_CONTROL_ADDR", cp.grpc.to_string())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn weirctl stat --watch");
    let mut lines = tokio::io::BufReader::new(watch.stdout.take().expect("piped")).lines();
    let mut headers = 0;
    tokio::time::timeout(Duration::from_secs(20), async {
        while headers < 3 {
            match lines.next_line().await.expect("read weirctl's output") {
                Some(l) if l.starts_with("SERVICE") => headers += 1,
                Some(_) => {}
                None => panic!("weirctl stat --watch exited"),
            }
        }
    })
    .await
    .expect("three refreshes within 20 s");
    watch.kill().await.expect("stop weirctl");
    traffic.finish().await;

    // -o yaml is data too.
    let out = cp.weirctl(&["get", "endpoints", "web", "-o", "yaml"]).await;
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains(&format!("address: {}", a.addr)),
        "{}",
        out.stdout
    );

    // usage errors exit 2; an unreachable control plane exits 1.
    assert_eq!(cp.weirctl(&["frobnicate"]).await.code, 2);
    let out = weirctl(free_addr(), &["get", "services"], None).await;
    assert_eq!(out.code, 1, "{out:?}");
}
