//! HTTP/1.1 clients in front of an HTTP/2 upstream (`appProtocol: h2c`): seeded random
//! well-formed requests (every body framing, trailers, repeated fields, obs-text, and the
//! hop-by-hop fields HTTP/2 forbids: `Connection` and the fields it names, `Keep-Alive`,
//! `Proxy-Connection`, `TE`, `Upgrade`) through the gateway to a recording hyper HTTP/2 server.
//! Each arrives once as its HTTP/2 translation: `:authority` from `Host`, no connection-specific
//! field (else the HTTP/2 client refuses to send it and the request fails), `te: trailers` only
//! when the client's `TE` names trailers, the body and its declared length, the chunked
//! trailers.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use weir_tests::recorder::{self, Seen};
use weir_tests::{fanout, raw_http1};

const CASES: usize = 300;
const DEADLINE: Duration = Duration::from_secs(10);

/// How the body follows the head.
#[derive(Debug, Clone)]
enum Body {
    None,
    Length(Vec<u8>),
    /// Chunks, then trailer fields.
    Chunked(Vec<Vec<u8>>, Vec<(String, Vec<u8>)>),
}

#[derive(Clone)]
struct Case {
    id: usize,
    method: &'static str,
    path: String,
    host: String,
    /// After Host, in order; names as sent (any case).
    fields: Vec<(String, Vec<u8>)>,
    body: Body,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fields: Vec<_> = self
            .fields
            .iter()
            .map(|(n, v)| format!("{n}: {}", v.escape_ascii()))
            .collect();
        let body = match &self.body {
            Body::None => "none".to_string(),
            Body::Length(b) => format!("length {}", b.len()),
            Body::Chunked(c, t) => format!(
                "chunked {:?} trailers {:?}",
                c.iter().map(Vec::len).collect::<Vec<_>>(),
                t.iter().map(|(n, _)| n).collect::<Vec<_>>()
            ),
        };
        write!(
            f,
            "{} {} host={} [{}] body={body}",
            self.method,
            self.path,
            self.host,
            fields.join(" | ")
        )
    }
}

impl Case {
    fn wire(&self) -> Vec<u8> {
        let mut out = format!(
            "{} {} HTTP/1.1\r\nHost: {}\r\n",
            self.method, self.path, self.host
        )
        .into_bytes();
        for (n, v) in &self.fields {
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(v);
            out.extend_from_slice(b"\r\n");
        }
        match &self.body {
            Body::None => out.extend_from_slice(b"\r\n"),
            Body::Length(b) => {
                out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", b.len()).as_bytes());
                out.extend_from_slice(b);
            }
            Body::Chunked(chunks, trailers) => {
                out.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
                for c in chunks.iter().filter(|c| !c.is_empty()) {
                    out.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
                    out.extend_from_slice(c);
                    out.extend_from_slice(b"\r\n");
                }
                out.extend_from_slice(b"0\r\n");
                for (n, v) in trailers {
                    out.extend_from_slice(n.as_bytes());
                    out.extend_from_slice(b": ");
                    out.extend_from_slice(v);
                    out.extend_from_slice(b"\r\n");
                }
                out.extend_from_slice(b"\r\n");
            }
        }
        out
    }

    fn body_bytes(&self) -> Vec<u8> {
        match &self.body {
            Body::None => Vec::new(),
            Body::Length(b) => b.clone(),
            Body::Chunked(c, _) => c.concat(),
        }
    }

    /// The names the client's `Connection` fields list, lower-cased.
    fn connection_names(&self) -> Vec<String> {
        self.fields
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
            .flat_map(|(_, v)| {
                String::from_utf8_lossy(v)
                    .split(',')
                    .map(|t| t.trim().to_ascii_lowercase())
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}

const HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "transfer-encoding",
    "upgrade",
    "trailer",
];

fn value(rng: &mut SmallRng) -> Vec<u8> {
    let mut v: Vec<u8> = (0..rng.gen_range(1..20))
        .map(|_| match rng.gen_range(0..12) {
            0 => b' ',
            1 => rng.gen_range(0x80..=0xff),
            _ => rng.gen_range(0x21..=0x7e),
        })
        .collect();
    // Spaces at either end are optional whitespace, not the value (RFC 9112 §5).
    while v.first() == Some(&b' ') {
        v.remove(0);
    }
    while v.last() == Some(&b' ') {
        v.pop();
    }
    if v.is_empty() {
        v.push(b'z');
    }
    v
}

fn bytes(rng: &mut SmallRng) -> Vec<u8> {
    let mut b = vec![0u8; rng.gen_range(0..2500)];
    rng.fill(&mut b[..]);
    b
}

fn case(rng: &mut SmallRng, id: usize) -> Case {
    let method = *["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
        .choose(rng)
        .expect("methods");
    let mut path = format!(
        "/u/{id}/{}",
        ["", "a", "a/b", "%2F", "x.y"].choose(rng).expect("tails")
    );
    if rng.gen_bool(0.3) {
        path += "?q=1&r=%20";
    }
    let host = ["svc.test", "svc.test:8080", "SVC.Test"]
        .choose(rng)
        .expect("hosts")
        .to_string();
    let mut fields = Vec::new();
    for _ in 0..rng.gen_range(0..5) {
        let name = *["X-A", "x-b", "Accept", "user-agent", "Cookie", "cookie"]
            .choose(rng)
            .expect("names");
        fields.push((name.to_string(), value(rng)));
    }
    match rng.gen_range(0..8) {
        0 => {
            fields.push(("Connection".into(), b"keep-alive, X-Hop".to_vec()));
            fields.push(("X-Hop".into(), b"secret".to_vec()));
        }
        1 => fields.push(("Keep-Alive".into(), b"timeout=5".to_vec())),
        2 => fields.push(("Proxy-Connection".into(), b"keep-alive".to_vec())),
        3 => {
            let te: &[u8] = [
                b"trailers".as_slice(),
                b"gzip",
                b"gzip, trailers",
                b"Trailers;q=1",
            ]
            .choose(rng)
            .expect("te");
            fields.push(("TE".into(), te.to_vec()));
        }
        4 => fields.push(("Upgrade".into(), b"h2c".to_vec())),
        _ => {}
    }
    fields.shuffle(rng);
    let body = match rng.gen_range(0..3) {
        0 => Body::None,
        1 => Body::Length(bytes(rng)),
        _ => {
            let chunks = (0..rng.gen_range(0..4)).map(|_| bytes(rng)).collect();
            let trailers = (0..rng.gen_range(0..3))
                .map(|i| (format!("X-Trailer-{i}"), value(rng)))
                .collect();
            Body::Chunked(chunks, trailers)
        }
    };
    Case {
        id,
        method,
        path,
        host,
        fields,
        body,
    }
}

fn values<'a>(fields: &'a [(String, Vec<u8>)], name: &str) -> Vec<&'a [u8]> {
    fields
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
        .collect()
}

/// Whether the upstream got `c` as its HTTP/2 translation.
fn translated(c: &Case, s: &Seen) -> Result<(), String> {
    let want = |what: &str, ok: bool| if ok { Ok(()) } else { Err(what.to_string()) };
    want("method", s.method == c.method)?;
    let uri: http::Uri = s.uri.parse().map_err(|_| format!("uri {}", s.uri))?;
    want(
        "request target",
        uri.path_and_query().map(|p| p.as_str()) == Some(c.path.as_str()),
    )?;
    want(
        ":authority from Host",
        uri.authority()
            .is_some_and(|a| a.as_str().eq_ignore_ascii_case(&c.host)),
    )?;
    want(
        "no Host beside :authority",
        values(&s.fields, "host").is_empty(),
    )?;
    let named = c.connection_names();
    let dropped = |n: &str| HOP.contains(&n) || named.iter().any(|m| m == n);
    for (name, _) in &c.fields {
        let lower = name.to_ascii_lowercase();
        if dropped(&lower) {
            continue;
        }
        want(
            &format!("field {lower}"),
            values(&s.fields, &lower) == values(&c.fields, &lower),
        )?;
    }
    let te_trailers = values(&c.fields, "te").iter().any(|v| {
        String::from_utf8_lossy(v).split(',').any(|t| {
            t.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .eq_ignore_ascii_case("trailers")
        })
    });
    for (name, value) in &s.fields {
        let own =
            ["x-forwarded-for", "x-forwarded-proto", "content-length"].contains(&name.as_str());
        let te = name == "te" && te_trailers && value == b"trailers";
        let sent = !dropped(name) && c.fields.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
        want(&format!("no field {name} of its own"), own || te || sent)?;
    }
    want(
        "te: trailers when the client's TE names it",
        values(&s.fields, "te").len() == usize::from(te_trailers),
    )?;
    if let Body::Length(b) = &c.body {
        let n = b.len().to_string();
        want(
            "the declared length",
            values(&s.fields, "content-length") == [n.as_bytes()],
        )?;
    }
    let Some(Ok((body, trailers))) = &s.end else {
        return Err(format!("a whole body, got {:?}", s.end));
    };
    want("the body's bytes", *body == c.body_bytes())?;
    let sent: Vec<(String, Vec<u8>)> = match &c.body {
        Body::Chunked(_, t) => t
            .iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
            .collect(),
        _ => Vec::new(),
    };
    want("the trailers", *trailers == sent)
}

#[tokio::test]
async fn http1_requests_reach_an_h2_upstream_as_their_translation() {
    let (up, proxy) = recorder::behind_a_gateway(true).await;
    let gw = proxy.gateway.expect("gateway listener");

    let seed = 0x0001_2c0d;
    let mut rng = SmallRng::seed_from_u64(seed);
    let cases: Vec<Case> = (0..CASES).map(|id| case(&mut rng, id)).collect();
    let replies = fanout::each(cases.iter().cloned(), 8, |c| async move {
        let mut io = BufReader::new(TcpStream::connect(gw).await.expect("connect"));
        io.write_all(&c.wire()).await.expect("write");
        let r = raw_http1::read_response(&mut io, c.method, DEADLINE).await;
        r.map(|r| r.status).map_err(|e| e.to_string())
    })
    .await;

    let id_of = |uri: &str| -> Option<usize> {
        let uri: http::Uri = uri.parse().ok()?;
        uri.path()
            .strip_prefix("/u/")?
            .split('/')
            .next()?
            .parse()
            .ok()
    };
    let mut failures = Vec::new();
    for c in &cases {
        let seen = up.matching(|uri| id_of(uri) == Some(c.id));
        let problem = match (&replies[c.id], seen.as_slice()) {
            (Ok(200), [s]) => translated(c, s).err(),
            (status, _) => Some(format!(
                "forwarded once and answered 200, got {status:?} and {} arrivals",
                seen.len()
            )),
        };
        if let Some(p) = problem {
            failures.push(format!("case {}: {p}\n  {c:?}", c.id));
        }
    }
    let stray = up
        .all()
        .iter()
        .filter(|s| id_of(&s.uri).is_none_or(|id| id >= CASES))
        .count();
    assert_eq!(stray, 0, "the upstream got requests no client sent");
    assert!(
        failures.is_empty(),
        "seed {seed:#x}: {} of {CASES} cases failed:\n{}",
        failures.len(),
        failures
            .iter()
            .take(12)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
