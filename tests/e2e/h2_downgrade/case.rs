//! Seeded random HTTP/2 requests for the downgrade differential: a well-formed request, or one
//! with a single defect RFC 9113 calls malformed, or one its client resets; and the frames that
//! carry it.

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::Rng;
use weir_tests::h2raw::{self, CONTINUATION, DATA, END_HEADERS, END_STREAM, HEADERS};

/// The authority every request names (any host reaches the gateway's one route).
pub const AUTHORITY: &str = "svc.test";
/// Bytes some bodies carry: an HTTP/1 request that must never reach the upstream as one.
pub const SMUGGLED: &[u8] = b"GET /smuggled HTTP/1.1\r\nHost: svc.test\r\n\r\n";

/// What RFC 9113 makes of a case, and so what may reach the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Well-formed: the upstream receives it once, translated.
    Forward,
    /// Malformed in its header block: nothing of it reaches the upstream.
    RefuseHead(&'static str),
    /// Malformed in its body or trailers, or reset by its client: its head may have gone on,
    /// but the upstream never sees it end (with a declared length, at most that many bytes).
    Unfinished(&'static str),
}

/// One request as sent, field by field.
#[derive(Clone)]
pub struct Case {
    pub id: usize,
    pub method: &'static str,
    /// `:path`; starts `/d/<id>/` when well-formed.
    pub path: String,
    pub authority: Option<String>,
    /// The header block's fields after the pseudo-headers, in order (names as sent).
    pub fields: Vec<(String, Vec<u8>)>,
    /// Pseudo-header fields sent after the usual ones, before the regular fields (a defect).
    pub extra_pseudo: Vec<(String, Vec<u8>)>,
    /// Pseudo-header fields sent after the regular ones (a defect).
    pub late_pseudo: Vec<(String, Vec<u8>)>,
    /// Pseudo-headers left out (a defect).
    pub omit: Vec<&'static str>,
    pub data: Vec<Vec<u8>>,
    pub trailers: Vec<(String, Vec<u8>)>,
    /// The client resets the stream after its data instead of ending it.
    pub reset: bool,
    pub verdict: Verdict,
}

/// Bytes as text, escaped, long runs cut.
pub fn show(b: &[u8]) -> String {
    let s = b.escape_ascii().to_string();
    if s.len() > 60 {
        format!("{}…({} bytes)", &s[..60], b.len())
    } else {
        s
    }
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fields = |v: &[(String, Vec<u8>)]| {
            v.iter()
                .map(|(n, v)| format!("{n}: {}", show(v)))
                .collect::<Vec<_>>()
                .join(" | ")
        };
        write!(
            f,
            "{} {} authority={:?} omit={:?} extra=[{}] [{}] late=[{}] data={:?} trailers=[{}] reset={}",
            self.method,
            self.path,
            self.authority,
            self.omit,
            fields(&self.extra_pseudo),
            fields(&self.fields),
            fields(&self.late_pseudo),
            self.data.iter().map(Vec::len).collect::<Vec<_>>(),
            fields(&self.trailers),
            self.reset
        )
    }
}

impl Case {
    /// The values of the field `name` as sent, in order.
    pub fn values(&self, name: &str) -> Vec<&[u8]> {
        self.fields
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
            .collect()
    }

    /// Every body byte sent.
    pub fn body(&self) -> Vec<u8> {
        self.data.concat()
    }

    /// The frames of stream 1: HEADERS (split over CONTINUATION when `split` is inside the
    /// block), DATA, trailers, and the end (END_STREAM, or RST_STREAM when `reset`).
    pub fn frames(&self, split: usize) -> Vec<u8> {
        let mut block = Vec::new();
        for (name, value) in [
            (":method", self.method.as_bytes()),
            (":scheme", b"http".as_slice()),
            (":path", self.path.as_bytes()),
        ] {
            if !self.omit.contains(&name) {
                h2raw::literal(name, value, &mut block);
            }
        }
        if let Some(a) = &self.authority {
            h2raw::literal(":authority", a.as_bytes(), &mut block);
        }
        for (n, v) in self
            .extra_pseudo
            .iter()
            .chain(&self.fields)
            .chain(&self.late_pseudo)
        {
            h2raw::literal(n, v, &mut block);
        }
        let ends_at_headers = self.data.is_empty() && self.trailers.is_empty() && !self.reset;
        let end = if ends_at_headers { END_STREAM } else { 0 };
        let mut out = Vec::new();
        if split > 0 && split < block.len() {
            out.extend(h2raw::frame(HEADERS, end, 1, &block[..split]));
            out.extend(h2raw::frame(CONTINUATION, END_HEADERS, 1, &block[split..]));
        } else {
            out.extend(h2raw::frame(HEADERS, end | END_HEADERS, 1, &block));
        }
        for (i, d) in self.data.iter().enumerate() {
            let last = i + 1 == self.data.len() && self.trailers.is_empty() && !self.reset;
            out.extend(h2raw::frame(DATA, if last { END_STREAM } else { 0 }, 1, d));
        }
        if !self.trailers.is_empty() {
            let mut t = Vec::new();
            for (n, v) in &self.trailers {
                h2raw::literal(n, v, &mut t);
            }
            let end = if self.reset { 0 } else { END_STREAM };
            out.extend(h2raw::frame(HEADERS, end | END_HEADERS, 1, &t));
        }
        if self.reset {
            out.extend(h2raw::rst_stream(1, h2raw::CANCEL));
        }
        out
    }
}

const METHODS: &[&str] = &["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"];
const NAMES: &[&str] = &["x-a", "x-b", "accept", "user-agent", "x-request-tag"];

/// Bytes a field value may hold inside (obs-text included), never at its edges.
fn value(rng: &mut SmallRng) -> Vec<u8> {
    let len = rng.gen_range(0..24);
    let mut v: Vec<u8> = (0..len)
        .map(|_| match rng.gen_range(0..10) {
            0 => b' ',
            1 => b'\t',
            2 => rng.gen_range(0x80..=0xff),
            _ => rng.gen_range(0x21..=0x7e),
        })
        .collect();
    while v.first().is_some_and(|b| *b == b' ' || *b == b'\t') {
        v.remove(0);
    }
    while v.last().is_some_and(|b| *b == b' ' || *b == b'\t') {
        v.pop();
    }
    v
}

fn cookie(rng: &mut SmallRng) -> Vec<u8> {
    let n = rng.gen_range(1..4);
    format!("c{}={}", rng.gen_range(0..100), "v".repeat(n)).into_bytes()
}

fn path(rng: &mut SmallRng, id: usize) -> String {
    const TAIL: &[&str] = &["", "a", "a/b", "%2F", "x.y", "~u", "a;b", "é"];
    let mut p = format!("/d/{id}/{}", TAIL.choose(rng).expect("tails"));
    // `é` is not a valid path byte: keep paths the URI grammar allows.
    p = p.replace('é', "%C3%A9");
    if rng.gen_bool(0.4) {
        p += &format!("?q={}&r=%20{}", rng.gen_range(0..9), rng.gen_range(0..9));
    }
    p
}

fn data(rng: &mut SmallRng) -> Vec<Vec<u8>> {
    (0..rng.gen_range(0..4))
        .map(|_| {
            if rng.gen_bool(0.2) {
                return SMUGGLED.to_vec();
            }
            let mut d = vec![0u8; rng.gen_range(0..3000)];
            rng.fill(&mut d[..]);
            d
        })
        .collect()
}

/// A well-formed request.
fn well_formed(rng: &mut SmallRng, id: usize) -> Case {
    let method = *METHODS.choose(rng).expect("methods");
    let mut fields = Vec::new();
    let authority = match rng.gen_range(0..4) {
        0 => {
            fields.push(("host".to_string(), AUTHORITY.as_bytes().to_vec()));
            None
        }
        1 => {
            // Both, equal but for case: allowed.
            fields.push(("host".to_string(), b"SVC.test".to_vec()));
            Some(AUTHORITY.to_string())
        }
        2 => Some(format!("{AUTHORITY}:8080")),
        _ => Some(AUTHORITY.to_string()),
    };
    for _ in 0..rng.gen_range(0..4) {
        fields.push(("cookie".to_string(), cookie(rng)));
    }
    for _ in 0..rng.gen_range(0..5) {
        let name = NAMES.choose(rng).expect("names").to_string();
        fields.push((name, value(rng)));
    }
    if rng.gen_bool(0.2) {
        fields.push(("te".to_string(), b"trailers".to_vec()));
    }
    let data = data(rng);
    if rng.gen_bool(0.5) {
        let n: usize = data.iter().map(Vec::len).sum();
        fields.push(("content-length".to_string(), n.to_string().into_bytes()));
    }
    fields.shuffle(rng);
    let trailers = if rng.gen_bool(0.25) {
        (0..rng.gen_range(1..3))
            .map(|i| (format!("x-trailer-{i}"), value(rng)))
            .collect()
    } else {
        Vec::new()
    };
    Case {
        id,
        method,
        path: path(rng, id),
        authority,
        fields,
        extra_pseudo: Vec::new(),
        late_pseudo: Vec::new(),
        omit: Vec::new(),
        data,
        trailers,
        reset: false,
        verdict: Verdict::Forward,
    }
}

/// A seeded case: about half well-formed, the rest with one defect.
pub fn case(rng: &mut SmallRng, id: usize) -> Case {
    let mut c = well_formed(rng, id);
    if rng.gen_bool(0.45) {
        return c;
    }
    let field = |n: &str, v: &[u8]| (n.to_string(), v.to_vec());
    let head = |c: &mut Case, why: &'static str, f: (String, Vec<u8>)| {
        let at = rng_index(c.id, c.fields.len());
        c.fields.insert(at, f);
        c.verdict = Verdict::RefuseHead(why);
    };
    match rng.gen_range(0..20) {
        0 => {
            let name = [
                "connection",
                "keep-alive",
                "proxy-connection",
                "transfer-encoding",
                "upgrade",
            ]
            .choose(rng)
            .expect("names");
            head(&mut c, "connection-specific field", field(name, b"chunked"));
        }
        1 => head(&mut c, "te other than trailers", field("te", b"gzip")),
        2 => head(&mut c, "uppercase field name", field("X-Upper", b"1")),
        3 => head(&mut c, "value with leading space", field("x-a", b" v")),
        4 => head(&mut c, "value with trailing tab", field("x-a", b"v\t")),
        5 => head(
            &mut c,
            "host differs from :authority",
            field("host", b"other.test"),
        ),
        6 => {
            c.late_pseudo.push(field(":path", b"/late"));
            c.verdict = Verdict::RefuseHead("pseudo-header after a regular field");
            if c.fields.is_empty() {
                c.fields.push(field("x-a", b"1"));
            }
        }
        7 => {
            c.extra_pseudo.push(field(":foo", b"1"));
            c.verdict = Verdict::RefuseHead("unknown pseudo-header");
        }
        8 => {
            c.omit
                .push([":method", ":path", ":scheme"].choose(rng).expect("pseudo"));
            c.verdict = Verdict::RefuseHead("missing pseudo-header");
        }
        9 => {
            let v: &[u8] = [b"a\0b".as_slice(), b"a\rb", b"a\nb", b"a\r\nx-in: 1"]
                .choose(rng)
                .expect("values");
            head(&mut c, "NUL, CR or LF in a value", field("x-a", v));
        }
        10 => head(&mut c, "invalid field name", field("x a", b"1")),
        11 => {
            c.fields.retain(|(n, _)| n != "host");
            if rng.gen_bool(0.5) {
                c.authority = Some(format!("user@{AUTHORITY}"));
                c.verdict = Verdict::RefuseHead("userinfo in :authority");
            } else {
                c.authority = Some(format!("{AUTHORITY}:70000"));
                c.verdict = Verdict::RefuseHead("a port over 65535 in :authority");
            }
        }
        12 => {
            c.path = c.path.trim_start_matches('/').to_string();
            c.verdict = Verdict::RefuseHead(":path not starting with /");
        }
        13 => {
            c.fields.retain(|(n, _)| n != "content-length");
            let v: &[u8] = [b"abc".as_slice(), b"-1", b"1,2", b""]
                .choose(rng)
                .expect("values");
            head(
                &mut c,
                "content-length not a number",
                field("content-length", v),
            );
        }
        14 => {
            c.authority = None;
            c.fields.retain(|(n, _)| n != "host");
            c.verdict = Verdict::RefuseHead("neither :authority nor host");
        }
        15 => {
            c.fields.retain(|(n, _)| n != "content-length");
            if c.data.is_empty() {
                c.data.push(b"x".to_vec());
            }
            let n = c.body().len();
            let declared = if rng.gen_bool(0.5) { n - 1 } else { n + 1 };
            c.fields
                .push(field("content-length", declared.to_string().as_bytes()));
            c.verdict = Verdict::Unfinished("content-length differs from the DATA");
        }
        16 => {
            // Malformed (RFC 9113 §8.1). After a regular field the h2 crate refuses it; as the
            // section's first field it drops it before anyone sees it, and the request goes
            // on without it.
            if !c.trailers.is_empty() {
                c.verdict = Verdict::Unfinished("pseudo-header after a field in trailers");
            }
            c.trailers.push(field(":status", b"200"));
        }
        17 => {
            c.trailers.push(field("connection", b"close"));
            c.verdict = Verdict::Unfinished("connection-specific field in trailers");
        }
        18 => {
            let (name, v): (&str, &[u8]) = [(":path", b"/other".as_slice()), (":method", b"GET")]
                .choose(rng)
                .copied()
                .expect("pseudo");
            c.extra_pseudo.push(field(name, v));
            c.verdict = Verdict::RefuseHead("repeated pseudo-header");
        }
        _ => {
            c.reset = true;
            c.verdict = Verdict::Unfinished("reset by the client");
        }
    }
    c
}

/// A position among `len + 1` decided by the case (its defect's place in the block).
fn rng_index(id: usize, len: usize) -> usize {
    id.wrapping_mul(7) % (len + 1)
}
