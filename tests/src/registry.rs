//! Registry YAML for tests that route gateway path prefixes to single-endpoint services.

use std::net::SocketAddr;

/// One service and the gateway prefix that reaches it.
#[derive(Debug, Clone)]
pub struct PrefixRoute<'a> {
    /// Path prefix on the gateway, e.g. `/web`; stripped before forwarding (`ReplacePrefixMatch: /`)
    /// when `strip` is set.
    pub prefix: &'a str,
    /// Strip the prefix before forwarding.
    pub strip: bool,
    /// The service's name (hosts: `<name>.test`).
    pub service: &'a str,
    /// `appProtocol`, when declared.
    pub app_protocol: Option<&'a str>,
    /// The service's endpoints (may be empty).
    pub endpoints: &'a [SocketAddr],
}

/// A registry with one service per route and gateway routes in the given order.
pub fn gateway_prefixes(routes: &[PrefixRoute<'_>]) -> String {
    let mut y = String::from("services:\n");
    for r in routes {
        y += &format!("  - name: {}\n    hosts: [{}.test]\n", r.service, r.service);
        if let Some(p) = r.app_protocol {
            y += &format!("    appProtocol: {p}\n");
        }
        if r.endpoints.is_empty() {
            y += "    endpoints: []\n";
        } else {
            y += "    endpoints:\n";
            for a in r.endpoints {
                y += &format!("      - address: \"{a}\"\n");
            }
        }
    }
    y += "gateway:\n  routes:\n";
    for r in routes {
        y += &format!(
            "    - name: {svc}\n      matches: [{{ path: {{ type: PathPrefix, value: {prefix} }} }}]\n",
            svc = r.service,
            prefix = r.prefix
        );
        if r.strip {
            y += "      filters:\n        - type: URLRewrite\n          urlRewrite: { path: { type: ReplacePrefixMatch, replacePrefixMatch: / } }\n";
        }
        y += &format!("      backendRefs: [{{ name: {} }}]\n", r.service);
    }
    y
}

/// A route stripping `prefix` to service `service` with endpoint `addr` and no `appProtocol`.
pub fn strip<'a>(prefix: &'a str, service: &'a str, addr: &'a [SocketAddr]) -> PrefixRoute<'a> {
    PrefixRoute {
        prefix,
        strip: true,
        service,
        app_protocol: None,
        endpoints: addr,
    }
}
