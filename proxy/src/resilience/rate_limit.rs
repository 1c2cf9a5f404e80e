//! Local rate limits: a lock-free token bucket (GCRA on one atomic), a bounded table of them per
//! key, and the limiter a policy compiles to.

use std::{
    hash::{BuildHasher, Hash, RandomState},
    net::IpAddr,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use http::{HeaderMap, HeaderName, HeaderValue};

use super::now_nanos;
use crate::{addr::ClientAddr, model};

/// Key slots in a keyed limiter's table (8 bytes each).
pub const DEFAULT_KEY_SLOTS: usize = 4096;

/// Over the limit: the wait until the next request would be allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryAfter(pub Duration);

impl RetryAfter {
    /// The 429's `Retry-After` value: whole seconds, rounded up, at least 1.
    pub fn header_value(&self) -> HeaderValue {
        let secs = self.0.as_secs() + u64::from(self.0.subsec_nanos() > 0);
        HeaderValue::from(secs.max(1))
    }
}

/// Requests per second and bucket size, as GCRA's emission interval and tolerance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rate {
    /// Nanoseconds per token.
    interval: u64,
    /// Nanoseconds of tokens a full bucket holds: `burst × interval`.
    tolerance: u64,
}

impl Rate {
    /// `burst` 0 (left out) means one second's worth of requests, at least one. A bucket holds
    /// at most 2^46 ns (19.5 h) of tokens: only absurdly slow rates with huge bursts notice.
    fn new(rps: f64, burst: u32) -> Self {
        let interval = ((1e9 / rps) as u64).max(1);
        let burst = if burst == 0 {
            rps.ceil().max(1.0) as u64
        } else {
            u64::from(burst)
        };
        Self {
            interval,
            // Keyed slots store 48 bits of time; a tolerance past 2^46 ns (19 h) could wrap.
            tolerance: interval.saturating_mul(burst).min(1 << 46),
        }
    }

    /// GCRA: with the bucket's theoretical arrival time `ahead` ns past now, admit and return the
    /// new `ahead`, or say how long until a token is due.
    fn admit(&self, ahead: u64) -> Result<u64, RetryAfter> {
        let next = ahead.saturating_add(self.interval);
        if next > self.tolerance {
            Err(RetryAfter(Duration::from_nanos(next - self.tolerance)))
        } else {
            Ok(next)
        }
    }
}

/// A token bucket shared by every request it limits: one `AtomicU64` (the theoretical arrival
/// time of the next request), updated by CAS.
#[derive(Debug)]
pub struct TokenBucket {
    tat: AtomicU64,
    rate: Rate,
}

impl TokenBucket {
    /// `rps` tokens per second into a bucket of `burst` (0: one second's worth).
    pub fn new(rps: f64, burst: u32) -> Self {
        Self {
            tat: AtomicU64::new(0),
            rate: Rate::new(rps, burst),
        }
    }

    /// Takes a token, or says how long until one is due.
    pub fn check(&self) -> Result<(), RetryAfter> {
        let now = now_nanos();
        let mut cur = self.tat.load(Ordering::Acquire);
        loop {
            let ahead = self.rate.admit(cur.saturating_sub(now))?;
            match self.tat.compare_exchange_weak(
                cur,
                now + ahead,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(()),
                Err(actual) => cur = actual,
            }
        }
    }
}

mod keyed;
mod overrides;

pub use keyed::KeyedBuckets;
pub use overrides::OverrideError;
use overrides::Overrides;

/// Who sent a request, as rate limits key it.
#[derive(Debug, Clone, Copy)]
pub struct Peer<'a> {
    /// The downstream address.
    pub addr: ClientAddr,
    /// The client's verified mesh identity, when its connection proved one.
    pub identity: Option<&'a str>,
}

impl From<ClientAddr> for Peer<'_> {
    /// A peer known only by its address: every connection today. mTLS hook: once the inbound
    /// listener verifies client certificates, the connection's identity (its SPIFFE ID) travels
    /// in `ConnInfo` and admission builds the `Peer` with it, so `key: identity` keys by it.
    fn from(addr: ClientAddr) -> Self {
        Self {
            addr,
            identity: None,
        }
    }
}

/// What a limit is counted per: `key: none | client | identity | header:<name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RateKey {
    /// One bucket for everyone.
    None,
    /// A bucket per client IP address.
    Client,
    /// A bucket per client mesh identity; per address for a client without one.
    Identity,
    /// A bucket per value of this request header (requests without it share one).
    Header(HeaderName),
}

impl RateKey {
    /// Parses the policy's `key`; `None` (left out) is `none`.
    pub fn parse(key: Option<&str>) -> Result<Self, String> {
        match key {
            None | Some("none") => Ok(RateKey::None),
            Some("client") => Ok(RateKey::Client),
            Some("identity") => Ok(RateKey::Identity),
            Some(k) => match k.strip_prefix("header:") {
                Some(name) => HeaderName::from_bytes(name.as_bytes())
                    .map(RateKey::Header)
                    .map_err(|_| format!("invalid header name {name:?}")),
                None => Err(format!(
                    "expected none, client, identity or header:<name>, got {k:?}"
                )),
            },
        }
    }
}

/// A `rateLimit` policy, compiled: build once per registry snapshot, share as `Arc`.
#[derive(Debug)]
pub struct RateLimiter {
    key: RateKey,
    global: TokenBucket,
    keyed: Option<KeyedBuckets>,
    overrides: Option<Box<Overrides>>,
}

impl RateLimiter {
    /// Errors on a rate that is not a positive number or a malformed `key` (validation should
    /// report both at load time).
    pub fn new(policy: &model::RateLimitPolicy) -> Result<Self, String> {
        let rps = policy.requests_per_second;
        if !(rps.is_finite() && rps > 0.0) {
            return Err(format!("requestsPerSecond must be positive, got {rps}"));
        }
        let key = RateKey::parse(policy.key.as_deref())?;
        let overrides = Overrides::compile(&key, &policy.overrides)
            .map_err(|e| format!("overrides[{}].{}: {}", e.index, e.field, e.message))?;
        let keyed =
            (key != RateKey::None).then(|| KeyedBuckets::new(rps, policy.burst, DEFAULT_KEY_SLOTS));
        Ok(Self {
            key,
            global: TokenBucket::new(rps, policy.burst),
            keyed,
            overrides,
        })
    }

    /// Admits the request or answers when to come back (429 with `Retry-After`).
    pub fn check<'a>(
        &self,
        headers: &HeaderMap,
        peer: impl Into<Peer<'a>>,
    ) -> Result<(), RetryAfter> {
        let Some(keyed) = &self.keyed else {
            return self.global.check();
        };
        let peer = peer.into();
        let over = self.overrides.as_deref();
        let by_ip = |ip: IpAddr| match over.and_then(|o| o.for_ip(ip)) {
            Some(limit) => limit.check(Some(ip)),
            None => keyed.check(&ip),
        };
        let by_value = |v: &[u8]| match over.and_then(|o| o.for_value(v)) {
            Some(limit) => limit.check(None),
            None => keyed.check(v),
        };
        match (&self.key, peer.identity) {
            (RateKey::Identity, Some(id)) => by_value(id.as_bytes()),
            (RateKey::Client | RateKey::Identity, _) => by_ip(peer.addr.0.ip().to_canonical()),
            (RateKey::Header(name), _) => {
                by_value(headers.get(name).map_or(&[][..], HeaderValue::as_bytes))
            }
            (RateKey::None, _) => self.global.check(),
        }
    }
}

/// Checks `overrides` for a limit keyed by `key`, as the limiter would compile them (the registry
/// check reports the first problem at its field).
pub fn check_overrides(
    key: &RateKey,
    overrides: &[model::RateOverride],
) -> Result<(), OverrideError> {
    Overrides::compile(key, overrides).map(drop)
}

/// A key's hash under a per-process random seed, so no one can aim keys at a victim's slot.
fn hash_key(seed: &RandomState, key: &impl Hash) -> u64 {
    seed.hash_one(key)
}

#[cfg(test)]
mod tests;
