//! The framing properties on seeded mutations of valid messages (the same cases every run), and
//! on the boundary cases of each size limit, which random input rarely reaches.

use rand::{rngs::SmallRng, Rng, SeedableRng};

use super::{
    chunked_body, chunked_body_in, downstream_bytes, request_head, response_head, response_head_in,
    upstream_bytes,
};

/// Mutations per property: ~1 s in all for the three in a debug build.
const CASES: usize = 4000;
/// Connections with mutated requests to the whole downstream server: ~0.3 s in a debug build.
const STREAMS: usize = 300;
/// Upstream connections answering with a mutated response (~1 in 3 still whole): ~0.5 s.
const ANSWERS: usize = 1000;

const REQUESTS: &[&[u8]] = &[
    b"GET /a?b=c HTTP/1.1\r\nHost: svc\r\nUser-Agent: t/1\r\nAccept: */*\r\n\r\n",
    b"POST /p HTTP/1.1\r\nHost: svc\r\nContent-Length: 5\r\nConnection: keep-alive, close\r\nTE: trailers\r\n\r\nhello",
    b"GET / HTTP/1.0\r\nHost: x\r\nConnection: Keep-Alive\r\n\r\n",
    b"\r\nPUT /u HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    b"GET http://svc:8080/abs HTTP/1.1\r\nHost: svc:8080\r\nX-A: 1\r\nx-a: 2\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\nHost: x\r\nContent-Length: 00\r\n\r\n",
];

const RESPONSES: &[&[u8]] = &[
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nServer: s\r\n\r\nhello",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2, 2\r\n\r\nok",
    b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nConnection: x-hop, keep-alive\r\nX-Hop: 1\r\n\r\n0\r\n\r\n",
    b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi",
    b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
];

/// Whole upstream answers: bodies of every framing, trailers, bytes after the response.
const UPSTREAM: &[&[u8]] = &[
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n3\r\nabc\r\n0\r\ngrpc-status: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloEXTRA",
    b"HTTP/1.1 200 OK\r\nServer: x\r\n\r\nuntil the close",
    b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nabc",
    b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nz",
];

const BODIES: &[&[u8]] = &[
    b"5;name=v\r\nhello\r\n1A \r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Sum: 1\r\nY: \t2\r\n\r\nGET",
    b"3\r\nabc\r\n0\r\n\r\n",
    b"0\r\nContent-Length: 3\r\nHost: h\r\nT: v\r\n\r\n",
    b"f ; ext=\"q\"\r\n0123456789abcde\r\n0;last\r\n\r\n",
];

/// Bytes a mutation writes: the framing code's special characters and a few ordinary ones.
const SPECIAL: &[u8] = b"\r\n \t:;,0aF\x00\x7f\x80\"-";

/// `base` with one to `most` random edits.
fn mutate(rng: &mut SmallRng, base: &[u8], most: usize) -> Vec<u8> {
    let mut v = base.to_vec();
    for _ in 0..rng.gen_range(1..=most) {
        let at = rng.gen_range(0..=v.len());
        let byte = SPECIAL[rng.gen_range(0..SPECIAL.len())];
        match rng.gen_range(0..6) {
            0 if at < v.len() => v[at] = byte,
            1 => v.insert(at, byte),
            2 if at < v.len() => {
                v.remove(at);
            }
            3 => {
                // Repeat a stretch: a line twice, a chunk twice.
                let from = rng.gen_range(0..=at);
                let copy = v[from..at].to_vec();
                v.splice(at..at, copy);
            }
            4 => v.truncate(at),
            _ => v.insert(at, rng.gen()),
        }
    }
    v
}

fn check_mutations(seeds: &[&[u8]], property: fn(u8, &[u8])) {
    let mut rng = SmallRng::seed_from_u64(0x00f0_22ed);
    for _ in 0..CASES {
        let base = seeds[rng.gen_range(0..seeds.len())];
        let input = mutate(&mut rng, base, 4);
        property(rng.gen(), &input);
    }
    for seed in seeds {
        for s in 0..=255 {
            property(s, seed);
        }
    }
}

#[test]
fn any_bytes_a_client_sends_get_well_formed_responses_then_a_close() {
    let mut rng = SmallRng::seed_from_u64(0x5e4e_d00d);
    for _ in 0..STREAMS {
        // One to three requests back to back (a pipeline), then the mutations.
        let mut wire = Vec::new();
        for _ in 0..rng.gen_range(1..=3) {
            wire.extend_from_slice(REQUESTS[rng.gen_range(0..REQUESTS.len())]);
        }
        downstream_bytes(&mutate(&mut rng, &wire, 4));
    }
    for seed in REQUESTS {
        downstream_bytes(seed);
    }
}

#[test]
fn any_bytes_an_upstream_answers_reach_the_client_as_the_decoders_read_them() {
    let mut rng = SmallRng::seed_from_u64(0x0005_7e4a);
    let seeds: Vec<&[u8]> = RESPONSES.iter().chain(UPSTREAM).copied().collect();
    for _ in 0..ANSWERS {
        // One edit: most responses still stand, so bodies and reuse are exercised too.
        let base = seeds[rng.gen_range(0..seeds.len())];
        upstream_bytes(&mutate(&mut rng, base, 1));
    }
    for seed in seeds {
        upstream_bytes(seed);
    }
}

#[test]
fn request_heads_decide_the_same_in_any_reads_and_go_upstream_intact() {
    check_mutations(REQUESTS, request_head);
}

#[test]
fn response_heads_decide_the_same_in_any_reads() {
    check_mutations(RESPONSES, response_head);
}

#[test]
fn chunked_bodies_decode_the_same_in_any_reads_and_end_where_the_guard_ends_them() {
    check_mutations(BODIES, chunked_body);
}

/// A head of `len` bytes: a status line and `X-Pad` fields, the last one sized to fit.
fn response_of(len: usize) -> Vec<u8> {
    let mut v = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n".to_vec();
    while v.len() + 4000 + 2 < len {
        v.extend_from_slice(b"X-Pad: ");
        v.extend(std::iter::repeat_n(b'p', 3991));
        v.extend_from_slice(b"\r\n");
    }
    let last = len - v.len() - 2 - b"X-Last: \r\n".len();
    v.extend_from_slice(b"X-Last: ");
    v.extend(std::iter::repeat_n(b'p', last));
    v.extend_from_slice(b"\r\n\r\n");
    assert_eq!(v.len(), len);
    v
}

/// Two reads of `len` bytes, the first ending at each byte of `first`.
fn two_reads(first: std::ops::Range<usize>, len: usize) -> impl Iterator<Item = [usize; 2]> {
    first.filter(move |&k| k < len).map(move |k| [k, len])
}

#[test]
fn a_response_head_at_the_size_limit_is_judged_the_same_in_any_reads() {
    let max = crate::http::h1::decode::MAX_HEAD;
    for len in [max - 1, max, max + 1, max + 2, max + 100] {
        let data = response_of(len);
        for ends in two_reads(max - 4..len, len) {
            response_head_in(false, &data, &ends);
        }
    }
}

#[test]
fn chunk_lines_and_trailers_at_their_limits_are_judged_the_same_in_any_reads() {
    for ext in 4080..4100 {
        let mut body = b"5;".to_vec();
        body.extend(std::iter::repeat_n(b'e', ext));
        body.extend_from_slice(b"\r\nhello\r\n0\r\n\r\n");
        for ends in two_reads(4080..4100, body.len()) {
            chunked_body_in(&body, &ends);
        }
    }
    // Trailer sections around 16 KiB, after the 3 bytes of `0` CRLF: three fields, a fourth
    // sized to fit, and the empty line.
    let max = 16 * 1024;
    for section in [max - 2, max - 1, max, max + 1, max + 2] {
        let mut body = b"0\r\n".to_vec();
        for _ in 0..3 {
            body.extend_from_slice(b"T: ");
            body.extend(std::iter::repeat_n(b'v', 4000));
            body.extend_from_slice(b"\r\n");
        }
        let last = 3 + section - body.len() - b"L: \r\n\r\n".len();
        body.extend_from_slice(b"L: ");
        body.extend(std::iter::repeat_n(b'v', last));
        body.extend_from_slice(b"\r\n\r\n");
        assert_eq!(body.len(), 3 + section);
        for ends in two_reads(max - 8..max + 8, body.len()) {
            chunked_body_in(&body, &ends);
        }
    }
}
