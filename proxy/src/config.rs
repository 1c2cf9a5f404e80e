//! The proxy's static configuration: typed, defaulted, validated. Every `WEIR_PROXY_*` name is
//! read in `config/env.rs` and nowhere else.

pub mod env;

use std::{net::SocketAddr, path::PathBuf, time::Duration};

pub use env::{EnvSource, ProcessEnv};

use crate::routing::PathNormalization;

/// Everything the proxy reads at start-up.
#[derive(Debug, Clone)]
pub struct Config {
    /// Outbound (transparent) listener; iptables redirects the app's outgoing connections here.
    pub outbound_listen: SocketAddr,
    /// Inbound (transparent) listener; iptables redirects connections to the pod's ports here.
    pub inbound_listen: SocketAddr,
    /// Admin listener: `/metrics`, `/ready`, `/live`, `/config`, `POST /shutdown`.
    pub admin_listen: SocketAddr,
    /// Gateway (explicit) listener; off unless set.
    pub gateway_listen: Option<SocketAddr>,
    /// Registry file loaded and watched in standalone mode.
    pub registry: Option<PathBuf>,
    /// Control plane address (`host:port`); unset = standalone.
    pub control_addr: Option<String>,
    /// How long a request to a destination the proxy has not asked the control plane about
    /// waits for the first answer before passing through.
    pub control_resolve_timeout: Duration,
    /// A control-plane target no request used for this long is dropped (watch cancelled).
    pub control_idle_timeout: Duration,
    /// This proxy's id as the control plane shows it (default `hostname-pid`).
    pub proxy_id: String,
    /// `host:port` where the control plane can reach the admin listener; default: the bound
    /// admin address, with an unspecified IP replaced by loopback.
    pub admin_advertise: Option<String>,
    /// Runtime worker threads.
    pub workers: usize,
    /// `tracing` filter directive.
    pub log: String,
    /// How long in-flight requests may run after SIGTERM.
    pub shutdown_grace: Duration,
    /// How long protocol detection waits for the client's first bytes before treating the
    /// connection as opaque TCP (server-speaks-first protocols start after this).
    pub detect_timeout: Duration,
    /// Destination ports that skip protocol detection and are proxied as opaque TCP.
    pub opaque_ports: Vec<u16>,
    /// A client must send a complete request head within this time (slowloris defence).
    pub header_read_timeout: Duration,
    /// Largest request head accepted; larger gets 431.
    pub max_header_bytes: usize,
    /// Idle downstream HTTP/1 keep-alive connections are closed after this.
    pub downstream_idle_timeout: Duration,
    /// An opaque TCP relay in which no byte moved either way for this long is closed (zero: never).
    pub tcp_idle_timeout: Duration,
    /// Upstream connect timeout.
    pub connect_timeout: Duration,
    /// Idle upstream keep-alive connections are closed after this.
    pub pool_idle_timeout: Duration,
    /// Idle HTTP/1 keep-alive connections kept per upstream endpoint; the least recently used
    /// beyond them are closed after 500 ms unused (0: none kept past that). Each costs ~17 KiB,
    /// so a burst of concurrent requests does not leave hundreds open.
    pub pool_max_idle_per_endpoint: usize,
    /// HTTP/2 server limits.
    pub h2: H2Limits,
    /// How often the registry file is checked for edits.
    pub registry_poll: Duration,
    /// How request paths are normalised before routes are matched (and as forwarded).
    pub path_normalization: PathNormalization,
    /// How header names are spelled in the HTTP/1 messages the proxy writes.
    pub http1_header_case: crate::http::h1::case::HeaderCase,
    /// The access log's format (off by default).
    pub access_log: crate::access_log::Format,
    /// Whether requests without `X-Request-Id` get one.
    pub request_id: crate::http::request_id::RequestId,
}

/// Every HTTP/2 limit the server enforces, set explicitly rather than inherited.
#[derive(Debug, Clone, Copy)]
pub struct H2Limits {
    /// SETTINGS_MAX_CONCURRENT_STREAMS advertised to clients.
    pub max_concurrent_streams: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: decoded header list bytes (bounds CONTINUATION/HPACK abuse).
    pub max_header_list_size: u32,
    /// Streams reset by the client before we accepted them, tolerated at once (CVE-2023-44487).
    pub max_pending_accept_reset_streams: usize,
    /// Streams we reset because of client errors, tolerated before GOAWAY.
    pub max_local_error_reset_streams: usize,
    /// Bytes buffered for sending per stream.
    pub max_send_buf_size: usize,
    /// Initial stream and connection windows.
    pub initial_stream_window: u32,
    pub initial_connection_window: u32,
    /// Keep-alive ping interval; a peer that does not answer within the timeout is dropped.
    pub keepalive_interval: Duration,
    pub keepalive_timeout: Duration,
}

impl Default for H2Limits {
    fn default() -> Self {
        Self {
            max_concurrent_streams: 256,
            max_header_list_size: 64 * 1024,
            max_pending_accept_reset_streams: 50,
            max_local_error_reset_streams: 256,
            max_send_buf_size: 256 * 1024,
            initial_stream_window: 256 * 1024,
            initial_connection_window: 1024 * 1024,
            keepalive_interval: Duration::from_secs(20),
            keepalive_timeout: Duration::from_secs(20),
        }
    }
}

/// Ports where the server speaks first or the protocol is never HTTP (SMTP, MySQL, Postgres...).
pub const DEFAULT_OPAQUE_PORTS: [u16; 8] = [25, 587, 3306, 4444, 5432, 6379, 9300, 11211];

impl Default for Config {
    fn default() -> Self {
        Self {
            outbound_listen: ([127, 0, 0, 1], 4140).into(),
            inbound_listen: ([0, 0, 0, 0], 4143).into(),
            admin_listen: ([0, 0, 0, 0], 4191).into(),
            gateway_listen: None,
            registry: None,
            control_addr: None,
            control_resolve_timeout: Duration::from_secs(1),
            control_idle_timeout: Duration::from_secs(300),
            proxy_id: env::default_proxy_id(&ProcessEnv),
            admin_advertise: None,
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            log: "info".into(),
            shutdown_grace: Duration::from_secs(30),
            detect_timeout: Duration::from_millis(500),
            opaque_ports: DEFAULT_OPAQUE_PORTS.to_vec(),
            header_read_timeout: Duration::from_secs(10),
            max_header_bytes: 64 * 1024,
            downstream_idle_timeout: Duration::from_secs(300),
            tcp_idle_timeout: Duration::from_secs(3600),
            connect_timeout: Duration::from_secs(1),
            pool_idle_timeout: Duration::from_secs(30),
            pool_max_idle_per_endpoint: 64,
            h2: H2Limits::default(),
            registry_poll: Duration::from_millis(250),
            path_normalization: PathNormalization::default(),
            http1_header_case: crate::http::h1::case::HeaderCase::default(),
            access_log: crate::access_log::Format::default(),
            request_id: crate::http::request_id::RequestId::default(),
        }
    }
}

impl Config {
    /// Whether connections to `port` skip detection.
    pub fn is_opaque_port(&self, port: u16) -> bool {
        self.opaque_ports.contains(&port)
    }
}
