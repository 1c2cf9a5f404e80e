//! Token buckets under paused time, under racing threads, and keyed under a flood of keys.

use std::{net::SocketAddr, sync::Arc};

use super::*;

const MS: Duration = Duration::from_millis(1);

fn allowed(check: impl Fn() -> Result<(), RetryAfter>, tries: u32) -> u32 {
    (0..tries).map(|_| u32::from(check().is_ok())).sum()
}

#[tokio::test(start_paused = true)]
async fn a_full_bucket_allows_its_burst_then_paces_at_the_rate() {
    let b = TokenBucket::new(10.0, 5);
    assert_eq!(allowed(|| b.check(), 100), 5);
    assert_eq!(
        b.check(),
        Err(RetryAfter(100 * MS)),
        "the next token is 100 ms away"
    );
    tokio::time::advance(40 * MS).await;
    assert_eq!(b.check(), Err(RetryAfter(60 * MS)));
    tokio::time::advance(60 * MS).await;
    assert_eq!(allowed(|| b.check(), 100), 1);
}

#[tokio::test(start_paused = true)]
async fn the_rate_holds_within_five_percent_over_ten_seconds() {
    let b = TokenBucket::new(100.0, 20);
    let mut admitted = 0;
    // A client asking 1,000 times a second.
    for _ in 0..10_000 {
        admitted += allowed(|| b.check(), 1);
        tokio::time::advance(MS).await;
    }
    let rate = f64::from(admitted) / 10.0;
    assert!(
        (95.0..=105.0).contains(&rate),
        "{rate} requests per second admitted"
    );
}

#[tokio::test(start_paused = true)]
async fn burst_left_out_means_one_seconds_worth() {
    let b = TokenBucket::new(50.0, 0);
    assert_eq!(allowed(|| b.check(), 1000), 50);
    let slow = TokenBucket::new(0.5, 0);
    assert_eq!(allowed(|| slow.check(), 10), 1, "at least one");
}

#[test]
fn racing_threads_take_exactly_the_burst() {
    // One token per 100 s: no refill while the threads race.
    let b = Arc::new(TokenBucket::new(0.01, 100));
    let total: u32 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| allowed(|| b.check(), 1000)))
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).sum()
    });
    assert_eq!(total, 100);
}

#[test]
fn retry_after_rounds_up_to_whole_seconds() {
    assert_eq!(RetryAfter(MS).header_value(), "1");
    assert_eq!(RetryAfter(Duration::from_secs(2)).header_value(), "2");
    assert_eq!(RetryAfter(Duration::from_millis(2001)).header_value(), "3");
}

#[tokio::test(start_paused = true)]
async fn each_key_has_its_own_bucket() {
    let k = KeyedBuckets::new(1.0, 2, 64);
    assert_eq!(allowed(|| k.check("alice"), 10), 2);
    assert_eq!(allowed(|| k.check("bob"), 10), 2);
    assert!(k.check("alice").is_err());
}

#[tokio::test(start_paused = true)]
async fn a_flood_of_keys_fits_the_table_and_evicts_only_idle_keys_losslessly() {
    let k = KeyedBuckets::new(1.0, 3, 64);
    assert_eq!(allowed(|| k.check("alice"), 10), 3);
    tokio::time::advance(Duration::from_secs(3)).await;
    for i in 0..10_000u32 {
        assert!(k.check(&i).is_ok(), "a new key has a full bucket");
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    assert_eq!(
        k.evictions(),
        0,
        "every key had gone idle before it was displaced"
    );
    assert_eq!(
        allowed(|| k.check("alice"), 10),
        3,
        "alice's bucket is full again"
    );
}

#[tokio::test(start_paused = true)]
async fn a_busy_key_keeps_its_limit_while_a_few_other_keys_come_and_go() {
    // Each table hashes with its own random seed. Over 1,000 of them some other key's two picks
    // both land on alice's slot (1 in 4096 per key if picks may coincide): with coinciding picks
    // this fails every time; with one table it failed about one CI run in 200.
    // A newcomer whose 16-bit fingerprint matches a key in one of its slots shares that key's
    // bucket (2 in 64 × 2^16 per key, by design), so newcomers are counted, not each asserted.
    let mut refused = 0;
    for _ in 0..1000 {
        let k = KeyedBuckets::new(1.0, 3, 64);
        assert_eq!(allowed(|| k.check("alice"), 10), 3);
        refused += (0..20u32).filter(|i| k.check(i).is_err()).count();
        assert!(k.check("alice").is_err(), "alice's bucket was reset");
    }
    assert!(refused <= 5, "{refused} of 20,000 newcomers refused");
}

#[test]
fn a_key_always_has_two_distinct_slots() {
    let k = KeyedBuckets::new(1.0, 3, 64);
    assert_eq!(
        k.candidates(5 | (5 << 24)),
        [5, 6],
        "coinciding picks: the next slot"
    );
    assert_eq!(k.candidates(63 | (63 << 24)), [63, 0], "wrapping round");
    assert_eq!(k.candidates(5 | (9 << 24)), [5, 9]);
    assert_eq!(
        KeyedBuckets::new(1.0, 3, 1).candidates(7),
        [0, 0],
        "one slot is all there is"
    );
}

fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    pairs
        .iter()
        .map(|(k, v)| (HeaderName::from_static(k), HeaderValue::from_static(v)))
        .collect()
}

fn client(s: &str) -> ClientAddr {
    ClientAddr(s.parse::<SocketAddr>().expect("address"))
}

fn limiter(key: Option<&str>) -> RateLimiter {
    RateLimiter::new(&model::RateLimitPolicy {
        requests_per_second: 1.0,
        burst: 1,
        key: key.map(str::to_string),
        overrides: Vec::new(),
    })
    .expect("valid policy")
}

#[tokio::test(start_paused = true)]
async fn a_header_keyed_limit_counts_each_header_value_apart() {
    let l = limiter(Some("header:x-user"));
    let c = client("10.0.0.1:1000");
    assert!(l.check(&headers(&[("x-user", "a")]), c).is_ok());
    assert!(l.check(&headers(&[("x-user", "a")]), c).is_err());
    assert!(l.check(&headers(&[("x-user", "b")]), c).is_ok());
    assert!(l.check(&HeaderMap::new(), c).is_ok());
    assert!(
        l.check(&HeaderMap::new(), c).is_err(),
        "no header: one shared bucket"
    );
}

#[tokio::test(start_paused = true)]
async fn a_client_keyed_limit_counts_per_ip_not_per_connection() {
    let l = limiter(Some("client"));
    let h = HeaderMap::new();
    assert!(l.check(&h, client("10.0.0.1:1000")).is_ok());
    assert!(l.check(&h, client("10.0.0.1:2000")).is_err());
    assert!(l.check(&h, client("10.0.0.2:1000")).is_ok());
}

#[tokio::test(start_paused = true)]
async fn an_unkeyed_limit_is_one_bucket_for_everyone() {
    let l = limiter(None);
    assert!(l.check(&HeaderMap::new(), client("10.0.0.1:1")).is_ok());
    assert!(l.check(&HeaderMap::new(), client("10.0.0.2:1")).is_err());
}

#[test]
fn keys_and_rates_are_checked() {
    assert_eq!(RateKey::parse(Some("none")), Ok(RateKey::None));
    assert_eq!(
        RateKey::parse(Some("header:X-User")),
        Ok(RateKey::Header(HeaderName::from_static("x-user")))
    );
    assert!(RateKey::parse(Some("header:")).is_err());
    assert!(RateKey::parse(Some("cookie:x")).is_err());
    let bad = |rps| model::RateLimitPolicy {
        requests_per_second: rps,
        burst: 0,
        key: None,
        overrides: Vec::new(),
    };
    assert!(RateLimiter::new(&bad(0.0)).is_err());
    assert!(RateLimiter::new(&bad(f64::NAN)).is_err());
}
