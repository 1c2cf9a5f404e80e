//! Reads `WEIR_PROXY_*` variables into a `Config`, reporting every bad variable at once.

use std::{collections::HashMap, net::SocketAddr, path::PathBuf, str::FromStr, time::Duration};

use super::Config;
use crate::model::parse_duration;

/// Where configuration strings come from: the process environment, or a map in tests.
pub trait EnvSource {
    /// The value of `key`, if set and non-empty.
    fn get(&self, key: &str) -> Option<String>;

    /// The proxy's variables that are set but cannot be read (not UTF-8): errors, not unset.
    fn unreadable(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The real process environment.
pub struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn get(&self, key: &str) -> Option<String> {
        std::env::var(key).ok().filter(|v| !v.is_empty())
    }

    fn unreadable(&self) -> Vec<String> {
        std::env::vars_os()
            .filter(|(_, v)| v.to_str().is_none())
            .filter_map(|(k, _)| k.into_string().ok())
            .filter(|k| k.starts_with("WEIR_PROXY_"))
            .collect()
    }
}

impl EnvSource for HashMap<String, String> {
    fn get(&self, key: &str) -> Option<String> {
        HashMap::get(self, key).cloned()
    }
}

impl EnvSource for HashMap<&str, &str> {
    fn get(&self, key: &str) -> Option<String> {
        HashMap::get(self, key).map(|v| v.to_string())
    }
}

/// Variables whose zero would stop the proxy working (every head timed out, every connect
/// failed, every request too large) or panic it (a zero poll period): refused at start.
const MORE_THAN_ZERO: &[&str] = &[
    "WEIR_PROXY_DETECT_TIMEOUT",
    "WEIR_PROXY_HEADER_READ_TIMEOUT",
    "WEIR_PROXY_MAX_HEADER_BYTES",
    "WEIR_PROXY_DOWNSTREAM_IDLE_TIMEOUT",
    "WEIR_PROXY_CONNECT_TIMEOUT",
    "WEIR_PROXY_REGISTRY_POLL",
    "WEIR_PROXY_H2_MAX_CONCURRENT_STREAMS",
    "WEIR_PROXY_H2_MAX_HEADER_LIST_SIZE",
];
const ZERO: &str = "must be more than 0";
const WINDOW: &str = "must be from 65535 to 2147483647 (RFC 9113 §6.9)";

/// Every variable the proxy reads, with what it means; README's table is generated from this.
pub const VARIABLES: &[(&str, &str)] = &[
    (
        "WEIR_PROXY_OUTBOUND_LISTEN",
        "outbound transparent listener (default 127.0.0.1:4140)",
    ),
    (
        "WEIR_PROXY_INBOUND_LISTEN",
        "inbound transparent listener (default 0.0.0.0:4143)",
    ),
    (
        "WEIR_PROXY_ADMIN_LISTEN",
        "admin listener (default 0.0.0.0:4191)",
    ),
    (
        "WEIR_PROXY_GATEWAY_LISTEN",
        "gateway listener; off unless set",
    ),
    (
        "WEIR_PROXY_REGISTRY",
        "registry file to load and watch (standalone mode)",
    ),
    (
        "WEIR_PROXY_CONTROL_ADDR",
        "control plane host:port (unset = standalone)",
    ),
    (
        "WEIR_PROXY_CONTROL_RESOLVE_TIMEOUT",
        "how long a request to a new destination waits for the control plane's answer (default 1s)",
    ),
    (
        "WEIR_PROXY_CONTROL_IDLE_TIMEOUT",
        "a control-plane target no request used for this long is dropped (default 5m)",
    ),
    (
        "WEIR_PROXY_ID",
        "this proxy's id shown by the control plane (default hostname-pid)",
    ),
    (
        "WEIR_PROXY_ADMIN_ADVERTISE",
        "admin host:port the control plane can reach (default: the bound admin address)",
    ),
    (
        "WEIR_PROXY_WORKERS",
        "runtime worker threads (default: CPUs available)",
    ),
    ("WEIR_PROXY_LOG", "tracing filter (default info)"),
    (
        "WEIR_PROXY_SHUTDOWN_GRACE",
        "drain period after SIGTERM (default 30s)",
    ),
    (
        "WEIR_PROXY_DETECT_TIMEOUT",
        "protocol detection deadline (default 500ms; the gateway waits the header-read timeout)",
    ),
    (
        "WEIR_PROXY_OPAQUE_PORTS",
        "comma-separated ports proxied as TCP without detection",
    ),
    (
        "WEIR_PROXY_HEADER_READ_TIMEOUT",
        "deadline for a complete request head (default 10s)",
    ),
    (
        "WEIR_PROXY_MAX_HEADER_BYTES",
        "largest request head, else 431 (default 65536)",
    ),
    (
        "WEIR_PROXY_DOWNSTREAM_IDLE_TIMEOUT",
        "idle client keep-alive connections close after this (default 300s)",
    ),
    (
        "WEIR_PROXY_TCP_IDLE_TIMEOUT",
        "an opaque TCP connection with no byte either way for this long is closed; 0 never (default 1h)",
    ),
    (
        "WEIR_PROXY_CONNECT_TIMEOUT",
        "upstream connect timeout (default 1s)",
    ),
    (
        "WEIR_PROXY_POOL_IDLE_TIMEOUT",
        "idle upstream keep-alive lifetime (default 30s)",
    ),
    (
        "WEIR_PROXY_POOL_MAX_IDLE_PER_ENDPOINT",
        "idle upstream HTTP/1 connections kept per endpoint; the least recently used beyond them close after 10 s unused, so the swings of a steady load do not close and reopen connections (default 64)",
    ),
    (
        "WEIR_PROXY_H2_MAX_CONCURRENT_STREAMS",
        "HTTP/2 streams per connection (default 256)",
    ),
    (
        "WEIR_PROXY_H2_MAX_HEADER_LIST_SIZE",
        "HTTP/2 header list bytes (default 65536)",
    ),
    (
        "WEIR_PROXY_H2_MAX_PENDING_RESETS",
        "HTTP/2 remote resets tolerated (default 50)",
    ),
    (
        "WEIR_PROXY_H2_STREAM_WINDOW",
        "HTTP/2 flow-control window of each client stream, bytes a client may send ahead on one stream (65535 to 2147483647; default 262144)",
    ),
    (
        "WEIR_PROXY_H2_CONNECTION_WINDOW",
        "HTTP/2 flow-control window of each client connection, bytes buffered for all its streams at most (65535 to 2147483647; default 1048576)",
    ),
    (
        "WEIR_PROXY_REGISTRY_POLL",
        "registry file check interval (default 250ms)",
    ),
    (
        "WEIR_PROXY_PATH_NORMALIZATION",
        "request paths normalised before routing and as forwarded: none, base, merge_slashes or decode_and_merge_slashes (default merge_slashes)",
    ),
    (
        "WEIR_PROXY_HTTP1_HEADER_CASE",
        "how header names are spelled in the HTTP/1 requests and responses the proxy writes: lower or title (default lower)",
    ),
];

/// All the variables that could not be read, each named.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration:\n{}", .0.join("\n"))]
pub struct ConfigError(pub Vec<String>);

struct Reader<'a, E: EnvSource> {
    env: &'a E,
    errors: Vec<String>,
}

impl<E: EnvSource> Reader<'_, E> {
    fn parse<T>(&mut self, key: &str, default: T, f: impl Fn(&str) -> Result<T, String>) -> T {
        match self.env.get(key) {
            None => default,
            Some(v) => f(v.trim()).unwrap_or_else(|e| {
                self.errors.push(format!("{key}={v:?}: {e}"));
                default
            }),
        }
    }

    fn addr(&mut self, key: &str, default: SocketAddr) -> SocketAddr {
        self.parse(key, default, |v| {
            SocketAddr::from_str(v).map_err(|e| e.to_string())
        })
    }

    /// An HTTP/2 flow-control window: no less than the protocol's initial 65,535 (a connection
    /// window can only grow from it) and at most 2^31 − 1.
    fn window(&mut self, key: &str, default: u32) -> u32 {
        self.parse(key, default, |v| {
            let n: u32 = v
                .parse()
                .map_err(|e: std::num::ParseIntError| e.to_string())?;
            if !(65_535..=0x7fff_ffff).contains(&n) {
                return Err(WINDOW.into());
            }
            Ok(n)
        })
    }

    fn duration(&mut self, key: &str, default: Duration) -> Duration {
        self.parse(key, default, |v| {
            let d = parse_duration(v)?;
            if d.is_zero() && MORE_THAN_ZERO.contains(&key) {
                return Err(ZERO.into());
            }
            Ok(d)
        })
    }

    fn number<T: FromStr + Default + PartialEq>(&mut self, key: &str, default: T) -> T
    where
        T::Err: std::fmt::Display,
    {
        self.parse(key, default, |v| {
            let n = v.parse().map_err(|e: T::Err| e.to_string())?;
            if n == T::default() && MORE_THAN_ZERO.contains(&key) {
                return Err(ZERO.into());
            }
            Ok(n)
        })
    }
}

impl Config {
    /// Reads the configuration, reporting all bad variables together.
    pub fn from_env(env: &impl EnvSource) -> Result<Config, ConfigError> {
        let d = Config::default();
        let mut r = Reader {
            env,
            errors: Vec::new(),
        };
        let gateway_listen = env
            .get("WEIR_PROXY_GATEWAY_LISTEN")
            .map(|_| r.addr("WEIR_PROXY_GATEWAY_LISTEN", ([0, 0, 0, 0], 0).into()));
        let mut h2 = d.h2;
        h2.max_concurrent_streams = r.number(
            "WEIR_PROXY_H2_MAX_CONCURRENT_STREAMS",
            h2.max_concurrent_streams,
        );
        h2.max_header_list_size = r.number(
            "WEIR_PROXY_H2_MAX_HEADER_LIST_SIZE",
            h2.max_header_list_size,
        );
        h2.max_pending_accept_reset_streams = r.number(
            "WEIR_PROXY_H2_MAX_PENDING_RESETS",
            h2.max_pending_accept_reset_streams,
        );
        h2.initial_stream_window =
            r.window("WEIR_PROXY_H2_STREAM_WINDOW", h2.initial_stream_window);
        h2.initial_connection_window = r.window(
            "WEIR_PROXY_H2_CONNECTION_WINDOW",
            h2.initial_connection_window,
        );
        let config = Config {
            outbound_listen: r.addr("WEIR_PROXY_OUTBOUND_LISTEN", d.outbound_listen),
            inbound_listen: r.addr("WEIR_PROXY_INBOUND_LISTEN", d.inbound_listen),
            admin_listen: r.addr("WEIR_PROXY_ADMIN_LISTEN", d.admin_listen),
            gateway_listen,
            registry: env.get("WEIR_PROXY_REGISTRY").map(PathBuf::from),
            control_addr: env
                .get("WEIR_PROXY_CONTROL_ADDR")
                .map(|_| r.parse("WEIR_PROXY_CONTROL_ADDR", String::new(), host_port)),
            control_resolve_timeout: r.duration(
                "WEIR_PROXY_CONTROL_RESOLVE_TIMEOUT",
                d.control_resolve_timeout,
            ),
            control_idle_timeout: r
                .duration("WEIR_PROXY_CONTROL_IDLE_TIMEOUT", d.control_idle_timeout),
            proxy_id: env
                .get("WEIR_PROXY_ID")
                .unwrap_or_else(|| default_proxy_id(env)),
            admin_advertise: env
                .get("WEIR_PROXY_ADMIN_ADVERTISE")
                .map(|_| r.parse("WEIR_PROXY_ADMIN_ADVERTISE", String::new(), host_port)),
            workers: r.parse("WEIR_PROXY_WORKERS", d.workers, |v| {
                match v.parse::<usize>() {
                    Ok(0) | Err(_) => Err("expected a whole number ≥ 1".into()),
                    Ok(n) => Ok(n),
                }
            }),
            log: r.parse("WEIR_PROXY_LOG", d.log, |v| {
                tracing_subscriber::EnvFilter::try_new(v)
                    .map(|_| v.to_owned())
                    .map_err(|e| e.to_string())
            }),
            shutdown_grace: r.duration("WEIR_PROXY_SHUTDOWN_GRACE", d.shutdown_grace),
            detect_timeout: r.duration("WEIR_PROXY_DETECT_TIMEOUT", d.detect_timeout),
            opaque_ports: r.parse("WEIR_PROXY_OPAQUE_PORTS", d.opaque_ports, |v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(|p| p.parse::<u16>().map_err(|_| format!("{p:?} is not a port")))
                    .collect()
            }),
            header_read_timeout: r
                .duration("WEIR_PROXY_HEADER_READ_TIMEOUT", d.header_read_timeout),
            max_header_bytes: r.number("WEIR_PROXY_MAX_HEADER_BYTES", d.max_header_bytes),
            downstream_idle_timeout: r.duration(
                "WEIR_PROXY_DOWNSTREAM_IDLE_TIMEOUT",
                d.downstream_idle_timeout,
            ),
            tcp_idle_timeout: r.duration("WEIR_PROXY_TCP_IDLE_TIMEOUT", d.tcp_idle_timeout),
            connect_timeout: r.duration("WEIR_PROXY_CONNECT_TIMEOUT", d.connect_timeout),
            pool_idle_timeout: r.duration("WEIR_PROXY_POOL_IDLE_TIMEOUT", d.pool_idle_timeout),
            pool_max_idle_per_endpoint: r.number(
                "WEIR_PROXY_POOL_MAX_IDLE_PER_ENDPOINT",
                d.pool_max_idle_per_endpoint,
            ),
            h2,
            registry_poll: r.duration("WEIR_PROXY_REGISTRY_POLL", d.registry_poll),
            path_normalization: r.parse(
                "WEIR_PROXY_PATH_NORMALIZATION",
                d.path_normalization,
                str::parse,
            ),
            http1_header_case: r.parse(
                "WEIR_PROXY_HTTP1_HEADER_CASE",
                d.http1_header_case,
                str::parse,
            ),
            access_log: r.parse("WEIR_PROXY_ACCESS_LOG", d.access_log, str::parse),
            request_id: r.parse("WEIR_PROXY_REQUEST_ID", d.request_id, str::parse),
        };
        match (&config.registry, &config.control_addr) {
            (None, None) => r.errors.push(
                "set WEIR_PROXY_REGISTRY (a registry file) or WEIR_PROXY_CONTROL_ADDR".into(),
            ),
            (Some(_), Some(_)) => r.errors.push(
                "WEIR_PROXY_REGISTRY and WEIR_PROXY_CONTROL_ADDR are both set; set one: \
                 a registry file (standalone) or the control plane"
                    .into(),
            ),
            _ => {}
        }
        for key in env.unreadable() {
            r.errors.push(format!("{key}: not valid UTF-8"));
        }
        if r.errors.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError(r.errors))
        }
    }
}

/// `host:port` with a numeric port, as tonic and the control plane expect it.
fn host_port(v: &str) -> Result<String, String> {
    match v.rsplit_once(':') {
        Some((host, port))
            if !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok() =>
        {
            Ok(v.to_string())
        }
        _ => Err("expected host:port, like weir-control.weir:8086".into()),
    }
}

/// `hostname-pid`: the pod name in Kubernetes (`HOSTNAME`), unique per process on one host.
pub fn default_proxy_id(env: &impl EnvSource) -> String {
    let host = env
        .get("HOSTNAME")
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "weir-proxy".into());
    format!("{host}-{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bad_variable_is_reported_at_once() {
        let env: HashMap<&str, &str> = [
            ("WEIR_PROXY_OUTBOUND_LISTEN", "nope"),
            ("WEIR_PROXY_DETECT_TIMEOUT", "5"),
            ("WEIR_PROXY_OPAQUE_PORTS", "25,smtp"),
            ("WEIR_PROXY_REGISTRY", "/etc/weir/registry.yaml"),
        ]
        .into();
        let err = Config::from_env(&env).expect_err("three bad variables");
        assert_eq!(err.0.len(), 3, "{err}");
        assert!(err.0[0].starts_with("WEIR_PROXY_OUTBOUND_LISTEN"));
        assert!(err
            .0
            .iter()
            .any(|e| e.starts_with("WEIR_PROXY_DETECT_TIMEOUT")));
        assert!(err.0.iter().any(|e| e.contains("\"smtp\" is not a port")));
    }

    #[test]
    fn defaults_follow_the_design() {
        let env: HashMap<&str, &str> = [("WEIR_PROXY_REGISTRY", "r.yaml")].into();
        let c = Config::from_env(&env).expect("valid");
        assert_eq!(c.outbound_listen.to_string(), "127.0.0.1:4140");
        assert_eq!(c.inbound_listen.to_string(), "0.0.0.0:4143");
        assert_eq!(c.admin_listen.to_string(), "0.0.0.0:4191");
        assert!(c.gateway_listen.is_none());
        assert!(c.is_opaque_port(5432) && !c.is_opaque_port(80));
    }

    #[test]
    fn the_idle_pool_cap_is_read_and_a_bad_one_named() {
        let env: HashMap<&str, &str> = [("WEIR_PROXY_REGISTRY", "r.yaml")].into();
        let c = Config::from_env(&env).expect("valid");
        assert_eq!(c.pool_max_idle_per_endpoint, 64);
        let env: HashMap<&str, &str> = [
            ("WEIR_PROXY_REGISTRY", "r.yaml"),
            ("WEIR_PROXY_POOL_MAX_IDLE_PER_ENDPOINT", "0"),
        ]
        .into();
        let c = Config::from_env(&env).expect("0 keeps no idle connection");
        assert_eq!(c.pool_max_idle_per_endpoint, 0);
        let env: HashMap<&str, &str> = [
            ("WEIR_PROXY_REGISTRY", "r.yaml"),
            ("WEIR_PROXY_POOL_MAX_IDLE_PER_ENDPOINT", "-1"),
        ]
        .into();
        let err = Config::from_env(&env).expect_err("negative");
        assert!(
            err.0[0].starts_with("WEIR_PROXY_POOL_MAX_IDLE_PER_ENDPOINT"),
            "{err}"
        );
    }

    #[test]
    fn any_value_of_any_variable_is_read_or_refused_by_name_never_a_panic() {
        const VALUES: &[&str] = &[
            "0",
            "-1",
            "1",
            "65536",
            "18446744073709551616",
            "1e400",
            "NaN",
            "0s",
            "1ns",
            "876001h",
            "99999999999999999999h",
            "1.5s",
            "s",
            "10 s",
            "true",
            "yes",
            ",",
            ",,",
            "a,b",
            "25,",
            "127.0.0.1:0",
            "[::1]:99999",
            "host:port",
            "é",
            "\u{0}",
            " ",
            "info,weir_proxy=trace",
            "/nonexistent/file",
        ];
        let long = "x".repeat(4096);
        for (name, _) in VARIABLES {
            for value in VALUES.iter().copied().chain([long.as_str()]) {
                // A registry, so that the only variable that can be wrong is the one tried.
                let mut env: HashMap<&str, &str> =
                    [("WEIR_PROXY_REGISTRY", "/etc/weir/registry.yaml")].into();
                env.insert(name, value);
                if let Err(e) = Config::from_env(&env) {
                    assert!(
                        e.0.iter().all(|m| m.contains(name)),
                        "{name}={value:?}: {e}"
                    );
                } else {
                    let zero = value == "0" || value == "0s";
                    assert!(
                        !(zero && MORE_THAN_ZERO.contains(name)),
                        "{name}={value:?} accepted"
                    );
                }
            }
        }
    }

    #[test]
    fn h2_windows_are_read_within_the_protocols_bounds() {
        let with = |k: &'static str, v: &'static str| -> HashMap<&'static str, &'static str> {
            [("WEIR_PROXY_REGISTRY", "r.yaml"), (k, v)].into()
        };
        let c = Config::from_env(&with("WEIR_PROXY_H2_STREAM_WINDOW", "65535")).expect("valid");
        assert_eq!(c.h2.initial_stream_window, 65_535);
        assert_eq!(c.h2.initial_connection_window, 1024 * 1024, "default");
        let c = Config::from_env(&with("WEIR_PROXY_H2_CONNECTION_WINDOW", "2147483647"))
            .expect("valid");
        assert_eq!(c.h2.initial_connection_window, 0x7fff_ffff);
        for (k, v) in [
            ("WEIR_PROXY_H2_STREAM_WINDOW", "65534"),
            ("WEIR_PROXY_H2_STREAM_WINDOW", "0"),
            ("WEIR_PROXY_H2_CONNECTION_WINDOW", "2147483648"),
            ("WEIR_PROXY_H2_CONNECTION_WINDOW", "1MiB"),
        ] {
            let err = Config::from_env(&with(k, v)).expect_err(v);
            assert!(err.0[0].starts_with(&format!("{k}={v:?}")), "{err}");
        }
    }

    #[test]
    fn the_readme_documents_every_variable() {
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
            .expect("README.md at the workspace root");
        for (name, _) in VARIABLES {
            assert!(
                readme.contains(&format!("`{name}`")),
                "README does not document {name}"
            );
        }
    }

    #[test]
    fn the_control_plane_mode_reads_its_variables() {
        let env: HashMap<&str, &str> = [
            ("WEIR_PROXY_CONTROL_ADDR", "weir-control.weir:8086"),
            ("WEIR_PROXY_CONTROL_RESOLVE_TIMEOUT", "250ms"),
            ("HOSTNAME", "web-7d9f"),
        ]
        .into();
        let c = Config::from_env(&env).expect("valid");
        assert_eq!(c.control_addr.as_deref(), Some("weir-control.weir:8086"));
        assert_eq!(c.control_resolve_timeout, Duration::from_millis(250));
        assert_eq!(c.control_idle_timeout, Duration::from_secs(300));
        assert_eq!(c.proxy_id, format!("web-7d9f-{}", std::process::id()));
        assert!(c.admin_advertise.is_none());
    }

    #[test]
    fn a_control_address_without_a_port_is_refused() {
        let env: HashMap<&str, &str> = [("WEIR_PROXY_CONTROL_ADDR", "http://weir-control")].into();
        let err = Config::from_env(&env).expect_err("no port");
        assert!(err.0[0].starts_with("WEIR_PROXY_CONTROL_ADDR"), "{err}");
    }

    #[test]
    fn a_registry_and_a_control_plane_together_are_refused_naming_both() {
        let env: HashMap<&str, &str> = [
            ("WEIR_PROXY_REGISTRY", "r.yaml"),
            ("WEIR_PROXY_CONTROL_ADDR", "127.0.0.1:8086"),
        ]
        .into();
        let err = Config::from_env(&env).expect_err("both set");
        assert_eq!(err.0.len(), 1, "{err}");
        assert!(err.0[0].contains("WEIR_PROXY_REGISTRY and WEIR_PROXY_CONTROL_ADDR"));
    }

    #[test]
    fn a_source_of_config_is_required() {
        let env: HashMap<&str, &str> = HashMap::new();
        assert!(Config::from_env(&env).is_err());
    }
}
