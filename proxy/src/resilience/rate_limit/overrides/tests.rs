//! Overrides under paused time: an overridden key holds its own limit, others keep the
//! default; addresses match exactly or by their narrowest range; bad lists are refused.

use std::{net::SocketAddr, time::Duration};

use http::{HeaderMap, HeaderName, HeaderValue};

use super::super::{check_overrides, Peer, RateKey, RateLimiter};
use crate::{addr::ClientAddr, model};

fn ov(value: &str, rps: f64, burst: u32) -> model::RateOverride {
    model::RateOverride {
        value: value.into(),
        requests_per_second: rps,
        burst,
    }
}

fn limiter(key: &str, overrides: Vec<model::RateOverride>) -> RateLimiter {
    RateLimiter::new(&model::RateLimitPolicy {
        requests_per_second: 1.0,
        burst: 2,
        key: Some(key.into()),
        overrides,
    })
    .expect("valid policy")
}

fn tenant(v: &'static str) -> HeaderMap {
    [(
        HeaderName::from_static("x-tenant"),
        HeaderValue::from_static(v),
    )]
    .into_iter()
    .collect()
}

fn from(addr: &str) -> ClientAddr {
    ClientAddr(addr.parse::<SocketAddr>().expect("address"))
}

/// Requests admitted out of `tries` in a row.
fn admitted(l: &RateLimiter, h: &HeaderMap, peer: Peer<'_>, tries: u32) -> u32 {
    (0..tries)
        .map(|_| u32::from(l.check(h, peer).is_ok()))
        .sum()
}

#[tokio::test(start_paused = true)]
async fn an_overridden_header_value_holds_its_own_limit_and_others_keep_the_default() {
    let l = limiter("header:x-tenant", vec![ov("gold", 10.0, 5)]);
    let c = Peer::from(from("10.0.0.1:1"));
    assert_eq!(
        admitted(&l, &tenant("gold"), c, 100),
        5,
        "the override's burst"
    );
    assert_eq!(
        admitted(&l, &tenant("free"), c, 100),
        2,
        "the default burst"
    );
    assert_eq!(
        admitted(&l, &tenant("other"), c, 100),
        2,
        "each value its own"
    );
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(admitted(&l, &tenant("gold"), c, 100), 5, "10 a second");
    assert_eq!(admitted(&l, &tenant("free"), c, 100), 1, "1 a second");
}

#[tokio::test(start_paused = true)]
async fn a_zero_rate_override_is_not_limited() {
    let l = limiter("header:x-tenant", vec![ov("internal", 0.0, 0)]);
    let c = Peer::from(from("10.0.0.1:1"));
    assert_eq!(admitted(&l, &tenant("internal"), c, 10_000), 10_000);
}

#[tokio::test(start_paused = true)]
async fn a_client_address_matches_its_own_override_else_its_narrowest_range() {
    let l = limiter(
        "client",
        vec![
            ov("10.0.0.0/8", 3.0, 3),
            ov("10.1.0.0/16", 0.0, 0),
            ov("10.1.2.3", 5.0, 5),
        ],
    );
    let h = HeaderMap::new();
    let n = |addr| admitted(&l, &h, Peer::from(from(addr)), 100);
    assert_eq!(n("10.1.2.3:1"), 5, "its own");
    assert_eq!(n("10.1.9.9:1"), 100, "the /16 wins over the /8");
    assert_eq!(n("10.2.0.1:1"), 3, "the /8");
    assert_eq!(n("10.2.0.2:1"), 3, "each address in the /8 its own bucket");
    assert_eq!(n("192.168.0.1:1"), 2, "the default");
    assert_eq!(
        n("[::ffff:10.2.0.3]:1"),
        3,
        "an IPv4-mapped address is its IPv4"
    );
}

#[tokio::test(start_paused = true)]
async fn identity_keys_by_the_verified_identity_else_by_address() {
    let l = limiter(
        "identity",
        vec![
            ov("spiffe://weir/ns/a/sa/web", 0.0, 0),
            ov("10.0.0.9", 5.0, 5),
        ],
    );
    let h = HeaderMap::new();
    let web = Peer {
        addr: from("10.0.0.9:1"),
        identity: Some("spiffe://weir/ns/a/sa/web"),
    };
    assert_eq!(admitted(&l, &h, web, 50), 50, "the identity's override");
    let other = Peer {
        identity: Some("spiffe://weir/ns/a/sa/job"),
        ..web
    };
    assert_eq!(
        admitted(&l, &h, other, 50),
        2,
        "another identity: the default"
    );
    assert_eq!(
        admitted(&l, &h, Peer::from(from("10.0.0.9:2")), 50),
        5,
        "no identity: the address and its override"
    );
}

#[test]
fn bad_override_lists_name_the_entry_and_field() {
    let header = RateKey::parse(Some("header:x-t")).expect("key");
    let err = |key: &RateKey, list: Vec<model::RateOverride>| {
        check_overrides(key, &list).expect_err("refused")
    };
    let e = err(&header, vec![ov("a", 1.0, 0), ov("a", 2.0, 0)]);
    assert_eq!((e.index, e.field), (1, "value"));
    assert!(e.message.contains("twice"), "{}", e.message);
    let e = err(&header, vec![ov("a", -1.0, 0)]);
    assert_eq!((e.index, e.field), (0, "requestsPerSecond"));
    let e = err(&header, vec![ov("a", f64::NAN, 0)]);
    assert_eq!(e.field, "requestsPerSecond");
    let e = err(&RateKey::Client, vec![ov("alice", 1.0, 0)]);
    assert_eq!(e.field, "value");
    let e = err(
        &RateKey::Client,
        vec![ov("10.0.0.0/8", 1.0, 0), ov("10.0.0.0/8", 2.0, 0)],
    );
    assert_eq!(e.index, 1);
    let e = err(&RateKey::Client, vec![ov("10.0.0.0/33", 1.0, 0)]);
    assert_eq!(e.field, "value");
    let e = err(&RateKey::None, vec![ov("x", 1.0, 0)]);
    assert!(e.message.contains("key"), "{}", e.message);
    assert!(check_overrides(&RateKey::Identity, &[ov("spiffe://x", 1.0, 0)]).is_ok());
}
