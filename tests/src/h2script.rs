//! A scripted h2c upstream, written frame by frame, for the ways real servers turn streams away
//! that no server library lets a test choose: a GOAWAY while a stream is still open, a GOAWAY
//! whose last stream id is below a request it was sent, and REFUSED_STREAM. Only the first
//! connection misbehaves; every request on a later one gets 200 with the body `conn <n>`.
//!
//! Request headers are never decoded: the script keys on stream order, not on paths.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{Duration, Instant};

use crate::h2raw::{
    frame, read_frame, rst_stream, settings_frame, ACK, DATA, END_HEADERS, END_STREAM, GOAWAY,
    HEADERS, NO_ERROR, PING, PREFACE, REFUSED_STREAM, SETTINGS,
};

/// How the first connection turns requests away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misstep {
    /// The first request gets a response head and a body that never ends; then GOAWAY (last
    /// stream: that one) and a PING, whose ACK tells the test the client has read the GOAWAY.
    /// Later streams on the connection are ignored, as RFC 9113 §6.8 lets a server do.
    GoawayWhileStreamOpen,
    /// The first request is answered; the second gets GOAWAY with the first as the last stream.
    GoawayBelowStream,
    /// The first request is reset with REFUSED_STREAM; later ones are answered.
    RefuseFirstStream,
}

/// Payload of the PING sent after the GOAWAY.
const MARK: [u8; 8] = *b"goaway!!";

/// HPACK `:status: 200` (static table index 8).
const STATUS_200: [u8; 1] = [0x88];

#[derive(Default)]
struct State {
    connections: AtomicU64,
    requests: AtomicU64,
    goaway_read: AtomicBool,
}

/// A running scripted upstream; stops when dropped.
pub struct ScriptedH2 {
    /// Where it listens.
    pub addr: SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl ScriptedH2 {
    /// Listens on a free loopback port.
    pub async fn start(misstep: Misstep) -> ScriptedH2 {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local_addr of a bound socket");
        let state = Arc::new(State::default());
        let task = tokio::spawn(accept_loop(listener, misstep, state.clone()));
        ScriptedH2 { addr, state, task }
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// HEADERS frames (requests) received so far, on every connection.
    pub fn requests(&self) -> u64 {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// Whether the client ACKed the PING sent after the GOAWAY, so has read the GOAWAY.
    pub fn goaway_read(&self) -> bool {
        self.state.goaway_read.load(Ordering::SeqCst)
    }
}

impl Drop for ScriptedH2 {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, misstep: Misstep, state: Arc<State>) {
    // Owning the connection tasks here means aborting this task closes all of them.
    let mut conns = JoinSet::new();
    loop {
        let Ok((io, _)) = listener.accept().await else {
            continue;
        };
        let n = state.connections.fetch_add(1, Ordering::SeqCst) + 1;
        let script = (n == 1).then_some(misstep);
        conns.spawn(serve(io, n, script, state.clone()));
        while conns.try_join_next().is_some() {}
    }
}

/// Serves one connection until the client closes it (or an hour passes: never in a test).
async fn serve(mut io: TcpStream, n: u64, script: Option<Misstep>, state: Arc<State>) {
    let _ = io.set_nodelay(true);
    let mut preface = [0u8; PREFACE.len()];
    if io.read_exact(&mut preface).await.is_err() || preface != PREFACE {
        return;
    }
    if io.write_all(&settings_frame(&[])).await.is_err() {
        return;
    }
    let mut buf = BytesMut::new();
    let end = Instant::now() + Duration::from_secs(3600);
    let mut streams_seen = 0u32;
    while let Ok(f) = read_frame(&mut io, &mut buf, end).await {
        let out = match f.kind {
            SETTINGS if f.flags & ACK == 0 => frame(SETTINGS, ACK, 0, &[]),
            PING if f.flags & ACK == 0 => frame(PING, ACK, 0, &f.payload),
            PING if f.payload == MARK => {
                state.goaway_read.store(true, Ordering::SeqCst);
                continue;
            }
            HEADERS => {
                state.requests.fetch_add(1, Ordering::SeqCst);
                streams_seen += 1;
                answer(script, streams_seen, f.stream, n)
            }
            _ => continue,
        };
        if io.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// What the `nth` request on a connection, on `stream`, gets.
fn answer(script: Option<Misstep>, nth: u32, stream: u32, conn: u64) -> Vec<u8> {
    match (script, nth) {
        (Some(Misstep::GoawayWhileStreamOpen), 1) => {
            let mut out = frame(HEADERS, END_HEADERS, stream, &STATUS_200);
            out.extend(goaway(stream));
            out.extend(frame(PING, 0, 0, &MARK));
            out
        }
        (Some(Misstep::GoawayWhileStreamOpen), _) => Vec::new(),
        (Some(Misstep::GoawayBelowStream), 2) => goaway(stream - 2),
        (Some(Misstep::RefuseFirstStream), 1) => rst_stream(stream, REFUSED_STREAM),
        _ => ok(stream, conn),
    }
}

fn goaway(last_stream: u32) -> Vec<u8> {
    let mut p = last_stream.to_be_bytes().to_vec();
    p.extend_from_slice(&NO_ERROR.to_be_bytes());
    frame(GOAWAY, 0, 0, &p)
}

fn ok(stream: u32, conn: u64) -> Vec<u8> {
    let mut out = frame(HEADERS, END_HEADERS, stream, &STATUS_200);
    out.extend(frame(
        DATA,
        END_STREAM,
        stream,
        format!("conn {conn}").as_bytes(),
    ));
    out
}
