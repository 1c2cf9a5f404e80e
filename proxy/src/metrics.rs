//! Every metric name, its description, and pre-built handles so the request path never formats
//! a label.

use std::sync::{Arc, OnceLock};

use metrics::{Counter, Histogram, Label};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Which path a request or connection took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    Inbound,
    Outbound,
    Gateway,
}

impl Direction {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Inbound => "inbound",
            Direction::Outbound => "outbound",
            Direction::Gateway => "gateway",
        }
    }
}

pub const REQUESTS: &str = "weir_requests_total";
pub const RESPONSES: &str = "weir_responses_total";
pub const DURATION: &str = "weir_request_duration_seconds";
pub const PROXY_ERRORS: &str = "weir_proxy_errors_total";
pub const RETRIES: &str = "weir_retries_total";
pub const RETRY_BUDGET_EXHAUSTED: &str = "weir_retry_budget_exhausted_total";
pub const TCP_OPENED: &str = "weir_tcp_connections_opened_total";
pub const TCP_CLOSED: &str = "weir_tcp_connections_closed_total";
pub const ACCEPT_FAILURES: &str = "weir_accept_failures_total";
pub const CONNECTIONS_REFUSED: &str = "weir_connections_refused_total";
pub const TCP_RX: &str = "weir_tcp_received_bytes_total";
pub const TCP_TX: &str = "weir_tcp_sent_bytes_total";
pub const TUNNELS_OPENED: &str = "weir_tunnels_opened_total";
pub const TUNNELS_CLOSED: &str = "weir_tunnels_closed_total";
pub const TUNNEL_RX: &str = "weir_tunnel_received_bytes_total";
pub const TUNNEL_TX: &str = "weir_tunnel_sent_bytes_total";
pub const DETECTIONS: &str = "weir_protocol_detections_total";
pub const ENDPOINT_DOWN: &str = "weir_endpoint_connect_failures_total";
pub const PARKED: &str = "weir_http1_parked_connections";
pub const CONTROL_CONNECTED: &str = "weir_control_connected";
pub const CONTROL_WATCHES: &str = "weir_control_watches";
pub const CONTROL_UPDATES: &str = "weir_control_updates_total";
pub const CONTROL_RECONNECTS: &str = "weir_control_reconnects_total";
pub const BREAKER_TRANSITIONS: &str = "weir_breaker_transitions_total";
pub const ENDPOINTS_EJECTED: &str = "weir_endpoints_ejected";
pub const ROUTE_BREAKER_TRANSITIONS: &str = "weir_route_breaker_transitions_total";
pub const RATE_LIMITED: &str = "weir_rate_limited_total";
pub const LOAD_SHED: &str = "weir_load_shed_total";
pub const MIRRORS: &str = "weir_mirror_requests_total";

/// Latency buckets in seconds: 0.5 ms to 30 s.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Installs the Prometheus recorder once per process (tests build several apps); the handle
/// renders `/metrics`.
pub fn install() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new()
                .set_buckets(BUCKETS)
                .expect("static, non-empty buckets")
                .install_recorder()
                .expect("no other metrics recorder is installed");
            describe();
            handle
        })
        .clone()
}

fn describe() {
    use metrics::{describe_counter, describe_histogram, Unit};
    describe_counter!(
        REQUESTS,
        "HTTP requests received, by direction, service and route."
    );
    describe_counter!(
        RESPONSES,
        "HTTP responses sent, by status class and code, classification (success|failure: 5xx, or \
         for gRPC a grpc-status other than 0) and, for gRPC, grpc_status; a streaming gRPC response \
         is counted when its trailers arrive."
    );
    describe_counter!(
        MIRRORS,
        "Mirror copies of requests, by the primary's direction, service and route and result \
         (sent: the shadow answered; failed: it could not be reached or timed out; dropped: not \
         sent, because the body was over 64 KiB, the client's body failed or too many were in flight)."
    );
    describe_histogram!(
        DURATION,
        Unit::Seconds,
        "Time from request received to response head sent."
    );
    describe_counter!(
        PROXY_ERRORS,
        "Responses the proxy produced itself, by cause (weir-proxy-error)."
    );
    describe_counter!(
        crate::access_log::DROPPED,
        "Access-log lines dropped because the writer fell behind (stdout slower than the requests)."
    );
    describe_counter!(
        RETRIES,
        "Requests sent again after a retryable failure, by direction, service and route."
    );
    describe_counter!(
        RETRY_BUDGET_EXHAUSTED,
        "Retries the policy allowed but the service's retry budget refused, by direction, service and route."
    );
    describe_counter!(
        ACCEPT_FAILURES,
        "Failed accepts (out of file descriptors, mostly), by listener; each is retried after 10 ms."
    );
    describe_counter!(
        CONNECTIONS_REFUSED,
        "Connections a transparent listener closed unread, by listener and reason (no-original-destination: not redirected; loop: aimed at the proxy itself)."
    );
    describe_counter!(TCP_OPENED, "Opaque TCP connections opened.");
    describe_counter!(
        TCP_CLOSED,
        "Opaque TCP connections closed, by how they ended (eof, idle-timeout, error, connect-failed)."
    );
    describe_counter!(
        TCP_RX,
        "Bytes received from the downstream client of opaque TCP connections."
    );
    describe_counter!(
        TCP_TX,
        "Bytes sent to the downstream client of opaque TCP connections."
    );
    describe_counter!(
        TUNNELS_OPENED,
        "Upgraded connections (WebSocket and other 101s, CONNECT's 2xx) whose splice began, by direction, service and route."
    );
    describe_counter!(
        TUNNELS_CLOSED,
        "Upgraded connections ended, by direction, service, route and how they ended (eof, idle-timeout, error)."
    );
    describe_counter!(
        TUNNEL_RX,
        "Bytes received from the downstream client of upgraded connections after the switch, by direction, service and route."
    );
    describe_counter!(
        TUNNEL_TX,
        "Bytes sent to the downstream client of upgraded connections after the switch, by direction, service and route."
    );
    describe_counter!(DETECTIONS, "Protocol detection outcomes, by protocol.");
    describe_counter!(
        crate::http::head_guard::REJECTED_HEADS,
        "HTTP/1 requests refused before they were forwarded (ambiguous framing, bad bytes, a small body that stalled), by reason."
    );
    metrics::describe_gauge!(
        PARKED,
        "Idle HTTP/1 keep-alive connections parked (hyper's buffers freed, socket kept)."
    );
    describe_counter!(
        ENDPOINT_DOWN,
        "Upstream connect failures that marked an endpoint down."
    );
    crate::discovery::describe_metrics();
    metrics::describe_gauge!(
        CONTROL_CONNECTED,
        "1 while the control plane answers the proxy's watches, 0 while the last known state is served."
    );
    metrics::describe_gauge!(
        CONTROL_WATCHES,
        "Targets the proxy watches on the control plane (one stream each)."
    );
    describe_counter!(
        CONTROL_UPDATES,
        "Updates received from the control plane, by result (snapshot, no_such_target, invalid)."
    );
    describe_counter!(
        BREAKER_TRANSITIONS,
        "Endpoint circuit-breaker changes, by service and new state (open, half_open, closed; refused: an ejection the minReadyEndpoints floor prevented)."
    );
    describe_counter!(
        ROUTE_BREAKER_TRANSITIONS,
        "Route circuit-breaker changes, by direction, service (the route's owner; empty for gateway routes), route and new state (open, half_open, closed)."
    );
    metrics::describe_gauge!(
        ENDPOINTS_EJECTED,
        "Endpoints of a service currently ejected (or probing) by their circuit breakers."
    );
    describe_counter!(
        RATE_LIMITED,
        "Requests answered 429 by a route or service rate limit, by direction, service and route."
    );
    describe_counter!(
        LOAD_SHED,
        "Requests shed by a service's concurrency limit, by reason (overloaded: queue full; queue-timeout)."
    );
    describe_counter!(
        CONTROL_RECONNECTS,
        "Watch streams to the control plane that failed and were reopened after a backoff."
    );
}

/// Handles for one (direction, service, route), built when the registry is loaded.
pub struct RouteMetrics {
    labels: Arc<[Label]>,
    requests: Counter,
    duration: Histogram,
    by_code: Box<[OnceLock<Counter>]>,
    // Registered on first use: most routes never retry, limit or mirror anything, and need no
    // series saying so.
    retries: OnceLock<Counter>,
    budget_exhausted: OnceLock<Counter>,
    rate_limited: OnceLock<Counter>,
    shed: [OnceLock<Counter>; 2],
    /// gRPC responses with HTTP 200, by `grpc-status` 0..=16 (anything else counts as 2, UNKNOWN).
    by_grpc: Box<[OnceLock<Counter>]>,
    /// Mirror copies, by [`MirrorResult`].
    mirrors: [OnceLock<Counter>; 3],
    /// Upgraded connections (`weir_tunnel*`): boxed, as most routes never switch protocols.
    tunnels: OnceLock<Box<TcpMetrics>>,
}

/// What became of one mirror copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MirrorResult {
    /// The shadow answered (whatever its status).
    Sent,
    /// Not sent: body too large, client body failed, or the in-flight cap was reached.
    Dropped,
    /// Sent, or tried, and the shadow could not be reached, failed or timed out.
    Failed,
}

impl MirrorResult {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            MirrorResult::Sent => "sent",
            MirrorResult::Dropped => "dropped",
            MirrorResult::Failed => "failed",
        }
    }
}

/// The highest gRPC status code (UNAUTHENTICATED).
const MAX_GRPC_STATUS: u32 = 16;

impl std::fmt::Debug for RouteMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteMetrics")
            .field("labels", &self.labels)
            .finish()
    }
}

impl RouteMetrics {
    /// Registers the series for one route.
    pub fn new(direction: Direction, service: &str, route: &str) -> Arc<Self> {
        let labels: Arc<[Label]> = vec![
            Label::new("direction", direction.as_str()),
            Label::new("service", service.to_string()),
            Label::new("route", route.to_string()),
        ]
        .into();
        Arc::new(Self {
            requests: metrics::counter!(REQUESTS, labels.iter()),
            duration: metrics::histogram!(DURATION, labels.iter()),
            by_code: (100..600).map(|_| OnceLock::new()).collect(),
            retries: OnceLock::new(),
            budget_exhausted: OnceLock::new(),
            rate_limited: OnceLock::new(),
            shed: Default::default(),
            by_grpc: (0..=MAX_GRPC_STATUS).map(|_| OnceLock::new()).collect(),
            mirrors: Default::default(),
            tunnels: OnceLock::new(),
            labels,
        })
    }

    /// The `service` label (`namespace/name`; `unknown` and the like for unrouted traffic).
    pub fn service(&self) -> &str {
        self.labels.get(1).map_or("", Label::value)
    }

    /// The `route` label.
    pub fn route(&self) -> &str {
        self.labels.get(2).map_or("", Label::value)
    }

    /// A request arrived.
    pub fn request(&self) {
        self.requests.increment(1);
    }

    /// Its response head went out after `secs`; counted by status (a 5xx is a failure).
    pub fn response(&self, status: u16, secs: f64) {
        self.head_sent(secs);
        self.count_status(status);
    }

    /// The response head went out after `secs`; the response is counted later, by
    /// [`Self::count_status`] or [`Self::count_grpc`].
    pub fn head_sent(&self, secs: f64) {
        self.duration.record(secs);
    }

    /// Counts a response by HTTP status; 5xx is classified a failure.
    pub fn count_status(&self, status: u16) {
        let idx = usize::from(status.clamp(100, 599) - 100);
        if let Some(slot) = self.by_code.get(idx) {
            slot.get_or_init(|| {
                let mut l = self.labels.to_vec();
                l.push(Label::new("status_class", format!("{}xx", status / 100)));
                l.push(Label::new("status_code", status.to_string()));
                l.push(Label::new(
                    "classification",
                    if status >= 500 { "failure" } else { "success" },
                ));
                metrics::counter!(RESPONSES, l.iter())
            })
            .increment(1);
        }
    }

    /// A request was sent again.
    pub fn retry(&self) {
        self.retries
            .get_or_init(|| metrics::counter!(RETRIES, self.labels.iter()))
            .increment(1);
    }

    /// A retry was refused because the service's retry budget was spent.
    pub fn budget_exhausted(&self) {
        self.budget_exhausted
            .get_or_init(|| metrics::counter!(RETRY_BUDGET_EXHAUSTED, self.labels.iter()))
            .increment(1);
    }

    /// A rate limit answered 429.
    pub fn rate_limited(&self) {
        self.rate_limited
            .get_or_init(|| metrics::counter!(RATE_LIMITED, self.labels.iter()))
            .increment(1);
    }

    /// The concurrency limit shed a request.
    pub fn shed(&self, why: crate::resilience::limit::Shed) {
        use crate::resilience::limit::Shed;
        let slot = usize::from(why == Shed::Timeout);
        self.shed[slot]
            .get_or_init(|| {
                let mut l = self.labels.to_vec();
                l.push(Label::new("reason", why.name()));
                metrics::counter!(LOAD_SHED, l.iter())
            })
            .increment(1);
    }

    /// Counts a gRPC response that had HTTP status 200 by its `grpc-status`: only 0 is a success.
    pub fn count_grpc(&self, grpc_status: u32) {
        let code = if grpc_status > MAX_GRPC_STATUS {
            crate::resilience::grpc::code::UNKNOWN
        } else {
            grpc_status
        };
        if let Some(slot) = self.by_grpc.get(code as usize) {
            slot.get_or_init(|| {
                let mut l = self.labels.to_vec();
                l.push(Label::new("status_class", "2xx"));
                l.push(Label::new("status_code", "200"));
                l.push(Label::new("grpc_status", code.to_string()));
                l.push(Label::new(
                    "classification",
                    if code == 0 { "success" } else { "failure" },
                ));
                metrics::counter!(RESPONSES, l.iter())
            })
            .increment(1);
        }
    }

    /// Counts one mirror copy of a request on this route.
    pub fn mirror(&self, result: MirrorResult) {
        self.mirrors[result as usize]
            .get_or_init(|| {
                let mut l = self.labels.to_vec();
                l.push(Label::new("result", result.as_str()));
                metrics::counter!(MIRRORS, l.iter())
            })
            .increment(1);
    }

    /// The series of this route's upgraded connections (registered on first use); a tunnel
    /// never fails to connect (that is an HTTP answer), so it has no `connect-failed` close.
    pub fn tunnels(&self) -> &TcpMetrics {
        self.tunnels.get_or_init(|| {
            let ends = [TcpEnd::Eof, TcpEnd::IdleTimeout, TcpEnd::Error];
            Box::new(TcpMetrics::register(&TUNNEL_NAMES, &self.labels, &ends))
        })
    }

    /// The proxy answered itself because of `cause`.
    pub fn proxy_error(&self, cause: &'static str) {
        let mut l = self.labels.to_vec();
        l.push(Label::new("error", cause));
        metrics::counter!(PROXY_ERRORS, l.iter()).increment(1);
    }
}

/// How an opaque TCP connection ended: the `reason` of its close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpEnd {
    /// Both sides finished cleanly (each EOF passed on).
    Eof,
    /// No byte moved either way for the idle timeout; both sides were closed.
    IdleTimeout,
    /// A read or write failed (mostly a reset); both sides were reset.
    Error,
    /// No upstream connection could be had; the client was closed.
    ConnectFailed,
}

impl TcpEnd {
    const ALL: [TcpEnd; 4] = [
        TcpEnd::Eof,
        TcpEnd::IdleTimeout,
        TcpEnd::Error,
        TcpEnd::ConnectFailed,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            TcpEnd::Eof => "eof",
            TcpEnd::IdleTimeout => "idle-timeout",
            TcpEnd::Error => "error",
            TcpEnd::ConnectFailed => "connect-failed",
        }
    }
}

/// The names of a [`TcpMetrics`]'s four series.
struct TcpNames {
    opened: &'static str,
    closed: &'static str,
    rx: &'static str,
    tx: &'static str,
}

const TCP_NAMES: TcpNames = TcpNames {
    opened: TCP_OPENED,
    closed: TCP_CLOSED,
    rx: TCP_RX,
    tx: TCP_TX,
};

const TUNNEL_NAMES: TcpNames = TcpNames {
    opened: TUNNELS_OPENED,
    closed: TUNNELS_CLOSED,
    rx: TUNNEL_RX,
    tx: TUNNEL_TX,
};

/// Handles for a byte relay: opaque TCP on one (direction, service), or the upgraded
/// connections of one route.
#[derive(Debug, Clone)]
pub struct TcpMetrics {
    pub opened: Counter,
    /// One per [`TcpEnd`], in its order.
    closed: [Counter; 4],
    pub rx: Counter,
    pub tx: Counter,
    /// The `service` label (for the access log's TCP lines).
    pub service: Arc<str>,
}

impl TcpMetrics {
    /// Registers the opaque TCP series of (direction, service).
    pub fn new(direction: Direction, service: &str) -> Self {
        let l = [
            Label::new("direction", direction.as_str()),
            Label::new("service", service.to_string()),
        ];
        Self::register(&TCP_NAMES, &l, &TcpEnd::ALL)
    }

    /// Registers `names` with `labels`, and a close series for each of `ends` (a close of
    /// another kind, which cannot happen there, goes uncounted rather than showing a zero).
    fn register(names: &TcpNames, labels: &[Label], ends: &[TcpEnd]) -> Self {
        let closed = TcpEnd::ALL.map(|end| {
            if !ends.contains(&end) {
                return Counter::noop();
            }
            let mut with = labels.to_vec();
            with.push(Label::new("reason", end.as_str()));
            metrics::counter!(names.closed, with.iter())
        });
        Self {
            opened: metrics::counter!(names.opened, labels.iter()),
            closed,
            rx: metrics::counter!(names.rx, labels.iter()),
            tx: metrics::counter!(names.tx, labels.iter()),
            service: labels
                .iter()
                .find(|l| l.key() == "service")
                .map_or("", Label::value)
                .into(),
        }
    }

    /// Counts a connection that ended as `end`.
    pub fn closed(&self, end: TcpEnd) {
        self.closed[end as usize].increment(1);
    }
}

/// Counts a detection outcome.
pub fn detection(direction: Direction, protocol: &'static str) {
    metrics::counter!(DETECTIONS, "direction" => direction.as_str(), "protocol" => protocol)
        .increment(1);
}
