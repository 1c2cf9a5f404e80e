//! `rateLimit.overrides`: key values with their own limit instead of the default. Compiled once
//! per snapshot into hash maps (exact header values, identities and addresses) and a short list
//! of CIDRs, longest prefix first; a lookup hashes the key it already has and allocates nothing.

use std::{collections::HashMap, net::IpAddr};

use super::{KeyedBuckets, RateKey, RetryAfter, TokenBucket, DEFAULT_KEY_SLOTS};
use crate::model::RateOverride;

/// Key slots for each CIDR override (each address in the range has its own bucket).
const CIDR_KEY_SLOTS: usize = DEFAULT_KEY_SLOTS / 4;

/// A bad override: its index in the list, the field at fault and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverrideError {
    /// Index into `overrides`.
    pub index: usize,
    /// `value` or `requestsPerSecond`.
    pub field: &'static str,
    /// Why.
    pub message: String,
}

/// An override's limit.
#[derive(Debug)]
pub(super) enum Limit {
    /// `requestsPerSecond: 0`: this key is not limited.
    Unlimited,
    /// One key (an exact value or address): one bucket.
    One(TokenBucket),
    /// A CIDR: a bucket per address in it, each at the override's rate.
    PerAddress(KeyedBuckets),
}

impl Limit {
    /// Takes a token for the client at `ip` (only [`Limit::PerAddress`] tells addresses apart,
    /// and only address lookups find one).
    pub(super) fn check(&self, ip: Option<IpAddr>) -> Result<(), RetryAfter> {
        match self {
            Limit::Unlimited => Ok(()),
            Limit::One(b) => b.check(),
            Limit::PerAddress(k) => k.check(&ip),
        }
    }
}

/// An address range: `10.0.0.0/8`, `fd00::/8`; IPv4 is kept IPv4-mapped in 128 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Cidr {
    bits: u128,
    len: u8,
}

impl Cidr {
    fn parse(s: &str) -> Option<Self> {
        let (ip, len) = s.split_once('/')?;
        let ip: IpAddr = ip.parse().ok()?;
        let len: u8 = len.parse().ok()?;
        let len = match ip {
            IpAddr::V4(_) if len <= 32 => len + 96,
            IpAddr::V6(_) if len <= 128 => len,
            _ => return None,
        };
        Some(Self {
            bits: bits(ip) & mask(len),
            len,
        })
    }

    fn contains(&self, ip: IpAddr) -> bool {
        bits(ip) & mask(self.len) == self.bits
    }
}

fn bits(ip: IpAddr) -> u128 {
    let v6 = match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    u128::from(v6)
}

fn mask(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

/// The overrides of one limiter.
#[derive(Debug, Default)]
pub(super) struct Overrides {
    /// Header values and identities.
    exact: HashMap<Box<[u8]>, usize>,
    /// Client addresses, canonical (an IPv4-mapped IPv6 address is its IPv4 address).
    ips: HashMap<IpAddr, usize>,
    /// Longest prefix first.
    nets: Vec<(Cidr, usize)>,
    limits: Vec<Limit>,
}

impl Overrides {
    /// Compiles `list` for a limit keyed by `key`; `None` when the list is empty.
    pub(super) fn compile(
        key: &RateKey,
        list: &[RateOverride],
    ) -> Result<Option<Box<Self>>, OverrideError> {
        if list.is_empty() {
            return Ok(None);
        }
        let mut o = Overrides::default();
        for (index, ov) in list.iter().enumerate() {
            let err = |field, message: String| OverrideError {
                index,
                field,
                message,
            };
            let rps = ov.requests_per_second;
            if !(rps.is_finite() && rps >= 0.0) {
                let msg = format!("must be 0 (no limit) or a positive number, got {rps}");
                return Err(err("requestsPerSecond", msg));
            }
            let value = ov.value.as_str();
            if value.is_empty() {
                return Err(err("value", "must not be empty".into()));
            }
            let at = o.limits.len();
            let cidr = Cidr::parse(value);
            let ip = value.parse::<IpAddr>().ok().map(|ip| ip.to_canonical());
            let fresh = match key {
                RateKey::None => {
                    let msg = "overrides need a `key` (client, identity or header:<name>)";
                    return Err(err("value", msg.into()));
                }
                RateKey::Header(_) => o.exact.insert(value.as_bytes().into(), at).is_none(),
                RateKey::Client | RateKey::Identity => match (ip, cidr) {
                    (Some(ip), _) => o.ips.insert(ip, at).is_none(),
                    (None, Some(c)) => {
                        let dup = o.nets.iter().any(|(n, _)| *n == c);
                        o.nets.push((c, at));
                        !dup
                    }
                    (None, None) if *key == RateKey::Identity => {
                        o.exact.insert(value.as_bytes().into(), at).is_none()
                    }
                    (None, None) => {
                        let msg = format!("expected a client IP or CIDR, got {value:?}");
                        return Err(err("value", msg));
                    }
                },
            };
            if !fresh {
                return Err(err("value", format!("{value:?} is overridden twice")));
            }
            o.limits.push(if rps == 0.0 {
                Limit::Unlimited
            } else if cidr.is_some() && ip.is_none() {
                Limit::PerAddress(KeyedBuckets::new(rps, ov.burst, CIDR_KEY_SLOTS))
            } else {
                Limit::One(TokenBucket::new(rps, ov.burst))
            });
        }
        o.nets.sort_by_key(|(n, _)| std::cmp::Reverse(n.len));
        Ok(Some(Box::new(o)))
    }

    /// The override for a header value or identity.
    pub(super) fn for_value(&self, value: &[u8]) -> Option<&Limit> {
        self.exact.get(value).map(|&i| &self.limits[i])
    }

    /// The override for a client address (canonical): its own, else its narrowest range.
    pub(super) fn for_ip(&self, ip: IpAddr) -> Option<&Limit> {
        let i = self.ips.get(&ip).copied().or_else(|| {
            self.nets
                .iter()
                .find(|(n, _)| n.contains(ip))
                .map(|&(_, i)| i)
        })?;
        Some(&self.limits[i])
    }
}

#[cfg(test)]
mod tests;
