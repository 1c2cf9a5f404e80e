//! The checks serde cannot express: names that must be unique, references that must resolve,
//! numbers that must be in range. Collects every problem, each with the path of the offending node.

use std::{
    collections::{HashMap, HashSet},
    net::SocketAddr,
};

use super::locate::Seg;
use crate::{
    model::{BackendRef, CircuitBreakerPolicy, Filter, RateLimitPolicy, Registry, Route},
    resilience::rate_limit::{check_overrides, RateKey},
};

/// Why nothing could connect to `addr`, if so: port 0, or the unspecified address (which
/// Linux would quietly take as this host).
fn unreachable(addr: SocketAddr) -> Option<String> {
    if addr.port() == 0 {
        Some("port 0".into())
    } else if addr.ip().is_unspecified() {
        Some(format!("the unspecified address {}", addr.ip()))
    } else {
        None
    }
}

/// `host` without the `:port` it was written with, if it has one (a bracketed IPv6 literal
/// alone has none).
fn without_port(host: &str) -> Option<&str> {
    let (name, port) = host.rsplit_once(':')?;
    let bracketed = host.starts_with('[') && host.ends_with(']');
    let is_port = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
    (!bracketed && is_port && !name.is_empty()).then_some(name)
}

/// Why `name` is no DNS label (RFC 1123 §2.1, as Kubernetes names a Service or namespace: at
/// most 63 lower-case letters, digits and `-`, starting and ending with a letter or digit),
/// if it is not. Names become hosts (`name.namespace.svc.cluster.local`) and metric labels.
fn not_a_label(name: &str) -> Option<&'static str> {
    let b = name.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if b.len() > 63 {
        Some("longer than 63 characters")
    } else if !b.iter().all(|c| alnum(c) || *c == b'-') {
        Some("only lower-case letters, digits and `-` are allowed")
    } else if !b.first().is_some_and(alnum) || !b.last().is_some_and(alnum) {
        Some("must start and end with a letter or digit")
    } else {
        None
    }
}

/// A semantic problem: where (a path into the document) and why.
pub(super) struct Issue {
    pub path: Vec<Seg>,
    pub message: String,
}

const REDIRECT_CODES: [u16; 5] = [301, 302, 303, 307, 308];

/// Lower-cases every host in place, then checks the whole registry.
pub(super) fn validate(registry: &mut Registry) -> Vec<Issue> {
    for service in &mut registry.services {
        for host in &mut service.hosts {
            host.make_ascii_lowercase();
        }
    }
    let mut issues = Vec::new();
    let mut push = |path: Vec<Seg>, message: String| issues.push(Issue { path, message });

    let mut names: HashMap<(&str, &str), usize> = HashMap::new();
    let mut addresses: HashMap<SocketAddr, usize> = HashMap::new();
    let mut hosts: HashMap<&str, usize> = HashMap::new();
    for (i, svc) in registry.services.iter().enumerate() {
        let at = |rest: &[Seg]| [&[Seg::Key("services"), Seg::Index(i)], rest].concat();
        if svc.name.is_empty() {
            push(at(&[Seg::Key("name")]), "a service needs a name".into());
        } else if let Some(first) = names.insert((&svc.namespace, &svc.name), i) {
            let msg = format!(
                "service {:?} in namespace {:?} is already declared at services[{first}]",
                svc.name, svc.namespace
            );
            push(at(&[Seg::Key("name")]), msg);
        }
        if let Some(why) = (!svc.name.is_empty())
            .then(|| not_a_label(&svc.name))
            .flatten()
        {
            let msg = format!("service name {:?} is not a DNS label: {why}", svc.name);
            push(at(&[Seg::Key("name")]), msg);
        }
        if let Some(why) = not_a_label(&svc.namespace) {
            let msg = format!("namespace {:?} is not a DNS label: {why}", svc.namespace);
            push(at(&[Seg::Key("namespace")]), msg);
        }
        for (j, addr) in svc.addresses.iter().enumerate() {
            if let Some(first) = addresses.insert(*addr, i).filter(|&first| first != i) {
                let owner = registry.services[first].qualified_name();
                push(
                    at(&[Seg::Key("addresses"), Seg::Index(j)]),
                    format!("address {addr} already belongs to service {owner}"),
                );
            }
        }
        for (j, host) in svc.hosts.iter().enumerate() {
            let path = at(&[Seg::Key("hosts"), Seg::Index(j)]);
            if host.is_empty() {
                push(path, "a host must not be empty".into());
            } else if let Some(bare) = without_port(host) {
                let msg = format!("hosts match the Host header without its port; write {bare:?}");
                push(path, msg);
            } else if !crate::http::host::is_valid(host.as_bytes())
                || (host.contains(':') && !host.starts_with('['))
            {
                // No request could carry it: a Host that is not `host[:port]` gets 400.
                let msg = format!("{host:?} is not a host name or IP address");
                push(path, msg);
            } else if let Some(first) = hosts.insert(host, i).filter(|&first| first != i) {
                let owner = registry.services[first].qualified_name();
                push(
                    path,
                    format!("host {host:?} already belongs to service {owner}"),
                );
            }
        }
        for (j, ep) in svc.endpoints.iter().enumerate() {
            if let Some(why) = unreachable(ep.address) {
                push(
                    at(&[Seg::Key("endpoints"), Seg::Index(j), Seg::Key("address")]),
                    format!("an endpoint cannot be reached at {why}"),
                );
            }
            if ep.weight == 0 {
                let msg = "must be at least 1 (to drain an endpoint, set `ready: false`)";
                push(
                    at(&[Seg::Key("endpoints"), Seg::Index(j), Seg::Key("weight")]),
                    msg.into(),
                );
            }
        }
        if let Some(budget) = &svc.policy.retry_budget {
            if !(0.0..=1.0).contains(&budget.ratio) {
                let path = at(&[
                    Seg::Key("policy"),
                    Seg::Key("retryBudget"),
                    Seg::Key("ratio"),
                ]);
                push(
                    path,
                    format!("must be between 0 and 1, got {}", budget.ratio),
                );
            }
        }
        if let Some(cb) = &svc.policy.circuit_breaker {
            check_breaker(
                cb,
                at(&[Seg::Key("policy"), Seg::Key("circuitBreaker")]),
                &mut push,
            );
        }
        if let Some(rl) = &svc.policy.rate_limit {
            check_rate_limit(
                rl,
                at(&[Seg::Key("policy"), Seg::Key("rateLimit")]),
                &mut push,
            );
        }
    }

    let known: HashSet<(&str, &str)> = names.into_keys().collect();
    let mut routes = RouteCheck {
        known: &known,
        push: &mut push,
    };
    for (i, svc) in registry.services.iter().enumerate() {
        for (j, route) in svc.routes.iter().enumerate() {
            let path = vec![
                Seg::Key("services"),
                Seg::Index(i),
                Seg::Key("routes"),
                Seg::Index(j),
            ];
            routes.check(route, &svc.namespace, path);
        }
    }
    for (j, route) in registry.gateway.routes.iter().enumerate() {
        routes.check(
            route,
            "default",
            vec![Seg::Key("gateway"), Seg::Key("routes"), Seg::Index(j)],
        );
    }
    issues
}

fn check_breaker(
    cb: &CircuitBreakerPolicy,
    path: Vec<Seg>,
    push: &mut impl FnMut(Vec<Seg>, String),
) {
    if let Some(sr) = &cb.success_rate {
        if !(0.0..=1.0).contains(&sr.threshold) {
            let path = [
                path.as_slice(),
                &[Seg::Key("successRate"), Seg::Key("threshold")],
            ]
            .concat();
            push(
                path,
                format!("must be between 0 and 1, got {}", sr.threshold),
            );
        }
        if sr.window.0.is_zero() {
            let path = [path, vec![Seg::Key("successRate"), Seg::Key("window")]].concat();
            push(path, "must be longer than 0".into());
        }
    }
}

fn check_rate_limit(rl: &RateLimitPolicy, path: Vec<Seg>, push: &mut impl FnMut(Vec<Seg>, String)) {
    let rps = rl.requests_per_second;
    if !(rps.is_finite() && rps > 0.0) {
        let at = [path.as_slice(), &[Seg::Key("requestsPerSecond")]].concat();
        push(at, format!("must be a positive number, got {rps}"));
    }
    match RateKey::parse(rl.key.as_deref()) {
        Err(e) => push([path, vec![Seg::Key("key")]].concat(), e),
        Ok(key) => {
            if let Err(e) = check_overrides(&key, &rl.overrides) {
                let at = [
                    Seg::Key("overrides"),
                    Seg::Index(e.index),
                    Seg::Key(e.field),
                ];
                push([path.as_slice(), &at].concat(), e.message);
            }
        }
    }
}

struct RouteCheck<'a, P> {
    known: &'a HashSet<(&'a str, &'a str)>,
    push: &'a mut P,
}

impl<P: FnMut(Vec<Seg>, String)> RouteCheck<'_, P> {
    fn check(&mut self, route: &Route, namespace: &str, path: Vec<Seg>) {
        let at = |rest: &[Seg]| [path.as_slice(), rest].concat();
        for (k, backend) in route.backend_refs.iter().enumerate() {
            self.backend(
                backend,
                namespace,
                at(&[Seg::Key("backendRefs"), Seg::Index(k)]),
            );
        }
        let mut terminal = false;
        for (k, filter) in route.filters.iter().enumerate() {
            let at = |rest: &[Seg]| {
                [path.as_slice(), &[Seg::Key("filters"), Seg::Index(k)], rest].concat()
            };
            match filter {
                Filter::RequestRedirect { request_redirect } => {
                    terminal = true;
                    let code = request_redirect.status_code;
                    if !REDIRECT_CODES.contains(&code) {
                        let path = at(&[Seg::Key("requestRedirect"), Seg::Key("statusCode")]);
                        (self.push)(
                            path,
                            format!("must be one of 301, 302, 303, 307, 308, got {code}"),
                        );
                    }
                }
                Filter::Fault { fault } => {
                    if let Some(abort) = &fault.abort {
                        terminal |= abort.percentage >= 100.0;
                        let path = at(&[Seg::Key("fault"), Seg::Key("abort")]);
                        self.percentage(
                            abort.percentage,
                            [path.as_slice(), &[Seg::Key("percentage")]].concat(),
                        );
                        if !(200..=599).contains(&abort.status) {
                            let msg = format!(
                                "must be an HTTP status from 200 to 599, got {}",
                                abort.status
                            );
                            (self.push)([path.as_slice(), &[Seg::Key("status")]].concat(), msg);
                        }
                    }
                    if let Some(delay) = &fault.delay {
                        let path =
                            at(&[Seg::Key("fault"), Seg::Key("delay"), Seg::Key("percentage")]);
                        self.percentage(delay.percentage, path);
                    }
                }
                Filter::RequestMirror { request_mirror } => {
                    let path = at(&[Seg::Key("requestMirror"), Seg::Key("backendRef")]);
                    self.backend(&request_mirror.backend_ref, namespace, path);
                }
                Filter::Cors { cors } if cors.allow_origins.is_empty() => {
                    let path = at(&[Seg::Key("cors"), Seg::Key("allowOrigins")]);
                    let msg = "a CORS filter needs an origin to allow (`*` for any)";
                    (self.push)(path, msg.into());
                }
                Filter::RequestHeaderModifier { .. }
                | Filter::ResponseHeaderModifier { .. }
                | Filter::URLRewrite { .. }
                | Filter::AddQueryParameter { .. }
                | Filter::Cors { .. } => {}
            }
        }
        if route.backend_refs.is_empty() && !terminal {
            let msg = "a route without backendRefs must redirect (RequestRedirect) or always abort (Fault abort at 100%)";
            (self.push)(at(&[Seg::Key("backendRefs")]), msg.into());
        }
        if let Some(cb) = &route.circuit_breaker {
            check_breaker(cb, at(&[Seg::Key("circuitBreaker")]), self.push);
        }
        if let Some(rl) = &route.rate_limit {
            check_rate_limit(rl, at(&[Seg::Key("rateLimit")]), self.push);
        }
    }

    fn backend(&mut self, backend: &BackendRef, namespace: &str, path: Vec<Seg>) {
        let ns = backend.namespace.as_deref().unwrap_or(namespace);
        if !self.known.contains(&(ns, backend.name.as_str())) {
            let msg = format!("no service {:?} in namespace {ns:?}", backend.name);
            (self.push)([path, vec![Seg::Key("name")]].concat(), msg);
        }
    }

    fn percentage(&mut self, value: f64, path: Vec<Seg>) {
        if !(0.0..=100.0).contains(&value) {
            (self.push)(path, format!("must be between 0 and 100, got {value}"));
        }
    }
}
