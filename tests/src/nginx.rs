//! A real nginx as a backend, on a free port with its own prefix directory (no root needed).
//!
//! Locations of the generated config:
//! - `/` (anything unmatched): `200 OK\n`
//! - `/echo...`: `200`, one `key=value` line each for `method`, `uri` (`$request_uri`), `host`
//!   (`$http_host`), `server` (the name given to the builder), `port`, and every echoed header
//!   (`x-request-source`, `x-forwarded-for`, `x-forwarded-proto`, `user-agent` by default);
//!   read it with [`parse_echo`]
//! - `/upload...`: accepts a body of any size (`client_max_body_size 0`), buffers it fully, and
//!   answers its length in bytes as the body: nginx proxies the buffered upload to its own
//!   internal `/__sink`, which echoes the `Content-Length` nginx computed
//! - `/status/<code>` for 200, 204, 400, 404, 500, 502, 503, 504: that status
//!
//! Every response carries `x-backend: <name>`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tokio::process::Command;

use crate::ports::free_addr;
use crate::process::ChildProc;
use crate::tmp::TempDir;
use crate::wait::try_poll_until;

/// Statuses that `/status/<code>` serves (nginx's `return` takes only a literal code).
const STATUSES: [u16; 8] = [200, 204, 400, 404, 500, 502, 503, 504];

/// Configuration of one nginx backend.
#[derive(Debug, Clone)]
pub struct NginxBuilder {
    name: String,
    echo_headers: Vec<String>,
    extra_locations: Vec<String>,
    http2: bool,
}

/// A running nginx; killed on drop.
#[derive(Debug)]
pub struct Nginx {
    /// Where it listens.
    pub addr: SocketAddr,
    name: String,
    child: ChildProc,
    dir: TempDir,
}

impl Nginx {
    /// A builder for a backend that answers as `name` (`server=` in echoes, `x-backend`).
    pub fn builder(name: &str) -> NginxBuilder {
        NginxBuilder {
            name: name.to_owned(),
            echo_headers: [
                "x-request-source",
                "x-forwarded-for",
                "x-forwarded-proto",
                "user-agent",
            ]
            .map(String::from)
            .to_vec(),
            extra_locations: Vec::new(),
            http2: false,
        }
    }

    /// Starts a default backend named `name`.
    pub async fn start(name: &str) -> Nginx {
        Nginx::builder(name).start().await
    }

    /// The backend's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The error log (nginx's own messages), for failure messages.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default() + &self.child.log()
    }

    /// The access log: one line per request, `$request $status $request_length`.
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default()
    }

    /// The prefix directory (config, logs, temp files).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl NginxBuilder {
    /// Also echo this request header (lower-case name) on `/echo`.
    pub fn echo_header(mut self, name: &str) -> Self {
        self.echo_headers.push(name.to_ascii_lowercase());
        self
    }

    /// Adds a raw `location ... { ... }` block to the server.
    pub fn location(mut self, block: &str) -> Self {
        self.extra_locations.push(block.to_owned());
        self
    }

    /// Serve HTTP/2 cleartext with prior knowledge only (nginx then refuses HTTP/1).
    pub fn http2(mut self, on: bool) -> Self {
        self.http2 = on;
        self
    }

    /// Writes the config, starts nginx and waits until it accepts connections; panics with its
    /// error log on failure.
    pub async fn start(self) -> Nginx {
        let dir = TempDir::new("nginx");
        let addr = free_addr();
        let conf = self.config(dir.path(), addr);
        std::fs::write(dir.join("nginx.conf"), conf).expect("write nginx.conf");
        let mut cmd = Command::new(crate::skip::tool("nginx"));
        cmd.arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(dir.join("nginx.conf"));
        cmd.arg("-e").arg(dir.join("error.log"));
        let child = ChildProc::spawn("nginx", cmd, &dir.join("stdout.log"));
        let mut nginx = Nginx {
            addr,
            name: self.name,
            child,
            dir,
        };
        let up = try_poll_until(Duration::from_secs(10), || async {
            tokio::net::TcpStream::connect(addr).await.ok().map(drop)
        });
        if up.await.is_none() || nginx.child.try_exit().is_some() {
            panic!(
                "nginx did not start on {addr}; error log:\n{}",
                nginx.error_log()
            );
        }
        nginx
    }

    fn config(&self, prefix: &Path, addr: SocketAddr) -> String {
        let p = prefix.display();
        let name = &self.name;
        let h2 = if self.http2 { " http2" } else { "" };
        let mut echo = String::from(
            "method=$request_method\\nuri=$request_uri\\nhost=$http_host\\n\
             server=$server_name\\nport=$server_port\\n",
        );
        for h in &self.echo_headers {
            let var = h.replace('-', "_");
            let _ = write!(echo, "{h}=$http_{var}\\n");
        }
        let mut statuses = String::new();
        for code in STATUSES {
            let _ = writeln!(
                statuses,
                "        location = /status/{code} {{ return {code} \"{code}\\n\"; }}"
            );
        }
        let extra = self.extra_locations.join("\n");
        format!(
            r#"daemon off;
master_process off;
worker_processes 1;
pid {p}/nginx.pid;
error_log {p}/error.log info;
events {{ worker_connections 1024; }}
http {{
    log_format weir '$request $status $request_length';
    access_log {p}/access.log weir;
    client_body_temp_path {p}/client_body;
    proxy_temp_path {p}/proxy;
    fastcgi_temp_path {p}/fastcgi;
    uwsgi_temp_path {p}/uwsgi;
    scgi_temp_path {p}/scgi;
    default_type text/plain;
    keepalive_requests 100000;
    server {{
        listen {addr}{h2};
        server_name {name};
        add_header x-backend {name} always;
        location / {{ return 200 "OK\n"; }}
        location /echo {{ return 200 "{echo}"; }}
        location /upload {{
            client_max_body_size 0;
            proxy_hide_header x-backend;
            proxy_pass http://{addr}/__sink;
        }}
        location ^~ /__sink {{
            client_max_body_size 0;
            return 200 "$http_content_length";
        }}
{statuses}
{extra}
    }}
}}
"#
        )
    }
}

/// Parses the `key=value` lines of an `/echo` body.
pub fn parse_echo(body: &str) -> BTreeMap<String, String> {
    body.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}
