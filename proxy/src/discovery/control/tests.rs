//! The control client against an in-process fake control plane on 127.0.0.1.

mod app;
mod fake;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use fake::{client, config, eventually, no_such_target, service, FakeControl};

use super::Link;

fn vip(s: &str) -> SocketAddr {
    s.parse().expect("a socket address")
}

#[tokio::test]
async fn resolve_waits_for_the_first_snapshot_and_the_registry_then_has_it() {
    let cp = FakeControl::start().await;
    cp.answer(
        "address 10.96.0.1:80",
        service("web", "10.96.0.1:80", &["127.0.0.1:9001"]),
    );
    let c = client(config(cp.addr));
    assert!(c.control.resolve(Some(vip("10.96.0.1:80")), None).await);
    // Resolve returns only once the applied registry includes the answer.
    assert_eq!(c.endpoints("web"), Some(vec!["127.0.0.1:9001".to_string()]));
    assert_eq!(c.control.link(), Link::Connected);
    let proxy = cp.counters.last_proxy.lock().expect("not poisoned").clone();
    let proxy = proxy.expect("ProxyInfo sent on Watch");
    assert_eq!(proxy.id, "test-proxy");
    assert_eq!(proxy.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(proxy.admin_addr, "127.0.0.1:4191");
}

#[tokio::test]
async fn an_unanswered_target_passes_through_after_the_resolve_timeout() {
    let cp = FakeControl::start().await;
    let mut cfg = config(cp.addr);
    cfg.resolve_timeout = Duration::from_millis(50);
    let c = client(cfg);
    assert!(!c.control.resolve(Some(vip("10.96.0.9:80")), None).await);
    assert_eq!(
        c.control.watches(),
        1,
        "the watch stays open for a later answer"
    );
}

#[tokio::test]
async fn no_such_target_is_cached_and_later_replaced_by_a_snapshot() {
    let cp = FakeControl::start().await;
    cp.answer("address 10.96.0.2:80", no_such_target());
    let c = client(config(cp.addr));
    let dst = Some(vip("10.96.0.2:80"));
    assert!(!c.control.resolve(dst, None).await);
    assert!(!c.control.resolve(dst, None).await);
    assert_eq!(
        cp.opened(),
        1,
        "the second request asked the cache, not the control plane"
    );

    cp.answer(
        "address 10.96.0.2:80",
        service("late", "10.96.0.2:80", &["127.0.0.1:9002"]),
    );
    eventually("the late service is applied", || {
        c.endpoints("late").is_some()
    })
    .await;
    assert!(c.control.resolve(dst, None).await);
    assert_eq!(cp.opened(), 1);
}

#[tokio::test]
async fn an_unknown_address_falls_back_to_the_authority() {
    let cp = FakeControl::start().await;
    cp.answer("address 10.0.0.7:8080", no_such_target());
    cp.answer(
        "authority api",
        service("api", "10.96.0.3:80", &["127.0.0.1:9003"]),
    );
    let c = client(config(cp.addr));
    assert!(
        c.control
            .resolve(Some(vip("10.0.0.7:8080")), Some("API"))
            .await
    );
    assert!(c.endpoints("api").is_some());
    assert_eq!(c.control.watches(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_resolves_of_one_target_open_one_watch() {
    let cp = FakeControl::start().await;
    let c = client(config(cp.addr));
    let dst = Some(vip("10.96.0.4:80"));
    let waiting: Vec<_> = (0..16)
        .map(|_| {
            let control = c.control.clone();
            tokio::spawn(async move { control.resolve(dst, None).await })
        })
        .collect();
    eventually("the watch is open", || cp.opened() == 1).await;
    cp.answer(
        "address 10.96.0.4:80",
        service("web", "10.96.0.4:80", &["127.0.0.1:9004"]),
    );
    for w in waiting {
        assert!(w.await.expect("resolve does not panic"));
    }
    assert_eq!(cp.opened(), 1);
    assert_eq!(c.control.watches(), 1);
}

#[tokio::test]
async fn an_update_replaces_the_state() {
    let cp = FakeControl::start().await;
    let target = "address 10.96.0.5:80";
    cp.answer(target, service("web", "10.96.0.5:80", &["127.0.0.1:9005"]));
    let c = client(config(cp.addr));
    assert!(c.control.resolve(Some(vip("10.96.0.5:80")), None).await);
    cp.answer(
        target,
        service("web", "10.96.0.5:80", &["127.0.0.1:9006", "127.0.0.1:9007"]),
    );
    eventually("the new endpoints are applied", || {
        c.endpoints("web") == Some(vec!["127.0.0.1:9006".into(), "127.0.0.1:9007".into()])
    })
    .await;
}

#[tokio::test]
async fn an_invalid_snapshot_keeps_the_previous_state() {
    let cp = FakeControl::start().await;
    let target = "address 10.96.0.6:80";
    cp.answer(target, service("web", "10.96.0.6:80", &["127.0.0.1:9008"]));
    let c = client(config(cp.addr));
    assert!(c.control.resolve(Some(vip("10.96.0.6:80")), None).await);
    cp.answer(target, service("web", "10.96.0.6:80", &["not-an-address"]));
    // A valid update after the invalid one proves the invalid one was seen and skipped.
    cp.answer(
        "address 10.96.0.6:80",
        service("web", "10.96.0.6:80", &["127.0.0.1:9009"]),
    );
    eventually("the valid update is applied", || {
        c.endpoints("web") == Some(vec!["127.0.0.1:9009".into()])
    })
    .await;
    let status = c.control.status_json();
    assert_eq!(status["targets"][0]["answer"], "snapshot");
}

#[tokio::test]
async fn the_last_state_serves_while_the_control_plane_is_down_and_a_new_one_is_picked_up() {
    let cp = FakeControl::start().await;
    let port = cp.addr;
    let dst = Some(vip("10.96.0.7:80"));
    cp.answer(
        "address 10.96.0.7:80",
        service("web", "10.96.0.7:80", &["127.0.0.1:9010"]),
    );
    let c = client(config(port));
    assert!(c.control.resolve(dst, None).await);
    cp.stop().await;

    eventually("the link is down", || {
        c.control.link() == Link::Disconnected
    })
    .await;
    assert_eq!(c.endpoints("web"), Some(vec!["127.0.0.1:9010".to_string()]));
    assert!(
        c.control.resolve(dst, None).await,
        "the cached answer still serves"
    );
    assert_eq!(c.control.status_json()["link"], "disconnected");

    let cp = FakeControl::start_at(port).await;
    cp.answer(
        "address 10.96.0.7:80",
        service("web", "10.96.0.7:80", &["127.0.0.1:9011"]),
    );
    eventually("the restarted control plane's state is applied", || {
        c.endpoints("web") == Some(vec!["127.0.0.1:9011".to_string()])
    })
    .await;
    assert_eq!(c.control.link(), Link::Connected);
}

#[tokio::test]
async fn idle_targets_are_evicted_and_their_services_leave_the_registry() {
    let cp = FakeControl::start().await;
    cp.answer(
        "gateway",
        service("edge", "10.96.0.8:80", &["127.0.0.1:9012"]),
    );
    cp.answer(
        "address 10.96.0.9:80",
        service("web", "10.96.0.9:80", &["127.0.0.1:9013"]),
    );
    let mut cfg = config(cp.addr);
    cfg.gateway = true;
    let c = client(cfg);
    assert!(c.control.resolve(Some(vip("10.96.0.9:80")), None).await);
    eventually("the gateway is answered", || {
        c.control.gateway_answered() == Some(true)
    })
    .await;
    eventually("both services are applied", || {
        c.endpoints("edge").is_some()
    })
    .await;

    let now = crate::clock::now_secs();
    assert_eq!(c.control.evict_idle(now), 0, "just used");
    assert_eq!(c.control.evict_idle(now + 3600), 1, "the gateway is pinned");
    assert_eq!(c.control.watches(), 1);
    eventually("the evicted watch is cancelled", || cp.open() == 1).await;
    eventually("its service leaves the registry", || {
        c.endpoints("web").is_none()
    })
    .await;
    assert!(c.endpoints("edge").is_some());

    // Needed again: a new watch.
    assert!(c.control.resolve(Some(vip("10.96.0.9:80")), None).await);
    assert_eq!(cp.opened(), 3);
}

#[tokio::test]
async fn the_sweeper_evicts_with_a_tiny_idle_timeout() {
    let cp = FakeControl::start().await;
    cp.answer("address 10.96.0.10:80", no_such_target());
    let mut cfg = config(cp.addr);
    cfg.idle_timeout = Duration::from_secs(1);
    let c = client(cfg);
    assert!(!c.control.resolve(Some(vip("10.96.0.10:80")), None).await);
    let c2 = Arc::clone(&c.control);
    eventually("the idle target is dropped", move || c2.watches() == 0).await;
}

#[tokio::test]
async fn a_second_target_for_a_service_already_known_resolves_without_a_rebuild() {
    let cp = FakeControl::start().await;
    let web = || service("web", "10.96.0.11:80", &["127.0.0.1:9014"]);
    cp.answer("address 10.96.0.11:80", web());
    cp.answer("authority web", web());
    let mut cfg = config(cp.addr);
    cfg.resolve_timeout = Duration::from_secs(2);
    let c = client(cfg);
    assert!(c.control.resolve(Some(vip("10.96.0.11:80")), None).await);
    let before = c.applied.borrow().clone();
    let started = tokio::time::Instant::now();
    assert!(
        c.control.resolve(None, Some("web")).await,
        "the unchanged union counts as applied"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(
        Arc::ptr_eq(&before, &c.applied.borrow()),
        "nothing was re-sent"
    );
}
