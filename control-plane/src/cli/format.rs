//! The `-o table` renderings: what an operator reads at a terminal.

use weir_proto::{admin as pb, discovery};

use super::{
    table::{list, Table},
    view,
};

/// `get services`: NAME NAMESPACE HOSTS ADDRESSES ENDPOINTS (ready/total).
pub fn services(r: &pb::ListServicesResponse) -> String {
    let mut t = Table::new(&["NAME", "NAMESPACE", "HOSTS", "ADDRESSES", "ENDPOINTS"]);
    for s in &r.services {
        let ready = s.endpoints.iter().filter(|e| e.ready).count();
        t.row(vec![
            s.name.clone(),
            s.namespace.clone(),
            list(&s.hosts),
            list(&s.addresses),
            format!("{ready}/{}", s.endpoints.len()),
        ]);
    }
    t.render()
}

/// `get endpoints SVC`: ADDRESS WEIGHT READY LABELS.
pub fn endpoints(s: &discovery::Service) -> String {
    let mut t = Table::new(&["ADDRESS", "WEIGHT", "READY", "LABELS"]);
    for e in &s.endpoints {
        let mut labels: Vec<String> = e.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        labels.sort();
        t.row(vec![
            e.address.clone(),
            e.weight.to_string(),
            e.ready.to_string(),
            list(&labels),
        ]);
    }
    t.render()
}

/// `describe service SVC`: the registry's view, then the proxies'.
pub fn describe(r: &pb::DescribeServiceResponse) -> String {
    let Some(s) = &r.service else {
        return String::new();
    };
    let data = view::Service::from(s);
    let mut out = String::new();
    let field = |out: &mut String, k: &str, v: String| out.push_str(&format!("{k:<14}{v}\n"));
    field(&mut out, "Name:", s.name.clone());
    field(&mut out, "Namespace:", s.namespace.clone());
    field(&mut out, "Hosts:", list(&s.hosts));
    field(&mut out, "Addresses:", list(&s.addresses));
    let proto = view::app_protocol(s.app_protocol).unwrap_or("(as the client speaks)");
    field(&mut out, "App protocol:", proto.to_string());
    out.push_str("Policy:");
    block(&mut out, data.policy.as_ref().map(yaml));
    out.push_str("Routes:");
    let routes = (!data.routes.is_empty()).then(|| yaml(&data.routes));
    block(&mut out, routes);
    out.push_str("Endpoints:\n");
    indent(&mut out, &endpoints(s));
    out.push_str("Endpoint state (as the proxies report it):");
    if r.endpoints.is_empty() {
        out.push_str(" (none reported)\n");
    } else {
        out.push('\n');
        let mut t = Table::new(&["PROXY", "ADDRESS", "STATE", "IN-FLIGHT", "LATENCY-EWMA"]);
        for e in &r.endpoints {
            t.row(vec![
                e.proxy_id.clone(),
                e.address.clone(),
                breaker_state(&e.state, e.ejected_for_ms, e.ejections),
                e.in_flight.to_string(),
                ms(e.latency_ewma_ms),
            ]);
        }
        indent(&mut out, &t.render());
    }
    if !r.route_breakers.is_empty() {
        out.push_str("Route breakers not closed:\n");
        let mut t = Table::new(&["PROXY", "ROUTE", "STATE"]);
        for b in &r.route_breakers {
            let route = if b.gateway {
                format!("{} (gateway)", b.route)
            } else {
                b.route.clone()
            };
            let state = breaker_state(&b.state, Some(b.ejected_for_ms), Some(b.ejections));
            t.row(vec![b.proxy_id.clone(), route, state]);
        }
        indent(&mut out, &t.render());
    }
    field(&mut out, "Watched by:", list(&r.watching_proxies));
    out
}

/// `ejected (probe in 41s, ejection 2)`, `probing (ejection 1)`, or the state as is.
fn breaker_state(state: &str, ejected_for_ms: Option<u64>, ejections: Option<u32>) -> String {
    let n = ejections.unwrap_or(0);
    match ejected_for_ms {
        Some(ms) if ms > 0 && n > 0 => {
            let probe = weir_proxy::model::format_duration(std::time::Duration::from_secs(
                ms.div_ceil(1000),
            ));
            format!("{state} (probe in {probe}, ejection {n})")
        }
        _ if n > 0 => format!("{state} (ejection {n})"),
        _ => state.to_string(),
    }
}

fn yaml<T: serde::Serialize>(v: &T) -> String {
    serde_yaml::to_string(v).unwrap_or_else(|e| format!("(cannot show: {e})\n"))
}

fn block(out: &mut String, body: Option<String>) {
    match body {
        None => out.push_str(" (none)\n"),
        Some(b) => {
            out.push('\n');
            indent(out, &b);
        }
    }
}

fn indent(out: &mut String, text: &str) {
    for line in text.lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
}

/// `apply` and `policy set`: one line per change, warnings, and for a dry run the diff.
pub fn apply(r: &pb::ApplyResponse, dry_run: bool) -> String {
    let mut out = String::new();
    for c in &r.changes {
        out.push_str(c);
        if dry_run {
            out.push_str(" (dry run)");
        }
        out.push('\n');
    }
    for w in &r.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    if dry_run {
        out.push_str(&r.diff);
    } else if !r.diff.is_empty() {
        out.push_str(&format!("registry version {}\n", r.version));
    }
    out
}

/// `stat`: SERVICE ROUTE DIRECTION SUCCESS RPS P50 P95 P99, as `linkerd viz stat` shows them
/// (one service has a row per direction its traffic was seen in).
pub fn stat(r: &pb::StatResponse, window: &str) -> String {
    if r.rows.is_empty() {
        return format!(
            "No traffic in the last {window} ({} proxies read).\n",
            r.proxies
        );
    }
    let mut t = Table::new(&[
        "SERVICE",
        "ROUTE",
        "DIRECTION",
        "SUCCESS",
        "RPS",
        "P50",
        "P95",
        "P99",
    ]);
    for row in &r.rows {
        let success = if row.requests == 0 {
            "-".to_string()
        } else {
            format!("{:.2}%", row.success_rate * 100.0)
        };
        let route = if row.route.is_empty() {
            "[default]".to_string()
        } else {
            row.route.clone()
        };
        t.row(vec![
            row.service.clone(),
            route,
            row.direction.clone(),
            success,
            format!("{:.1}", row.rps),
            ms(row.p50_ms),
            ms(row.p95_ms),
            ms(row.p99_ms),
        ]);
    }
    t.render()
}

/// Drops the rows with no requests in the window unless the operator named a service: across
/// the mesh they are noise, for one service a `-` row says it is known but idle.
pub fn drop_idle_rows(r: &mut pb::StatResponse, service: Option<&str>) {
    if service.is_none() {
        r.rows.retain(|row| row.requests > 0);
    }
}

/// `3ms`, `1.5ms`: whole milliseconds once they stop mattering.
fn ms(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}ms")
    } else {
        format!("{v:.1}ms")
    }
}
