//! Our HTTP/1.1 client for pooled upstream connections. The request's own task writes the head
//! and reads the response into buffers the connection keeps between requests: no connection
//! task, no request channel, no per-request buffer. (hyper's client cost a third of the proxy's
//! instructions per request; upgrades and HTTP/2 still go through hyper.)

mod body;
pub mod case;
pub(crate) mod chunked;
pub(crate) mod decode;
pub(crate) mod encode;
pub(crate) mod names;
#[cfg(test)]
mod tests;
pub(crate) mod write;

use std::{
    future::poll_fn,
    io,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use bytes::BytesMut;
use http::{request::Parts, HeaderMap, Method, Response};
use http_body::Body;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{tcp::ReadHalf, TcpStream},
};

pub use body::ResponseBody;
use decode::{BodyFraming, Head};
use encode::Framing;
use write::{BodyWriter, WriteError};

use super::{
    body::{BodyError, ProxyBody},
    read_room, spare_maps,
};

/// Reads never go below this much free buffer space...
const MIN_READ: usize = 4 * 1024;
/// ...and grow the buffer by this much. Response heads and small bodies are split off the buffer
/// without copying, so one allocation serves many responses.
const READ_SIZE: usize = 16 * 1024;

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The socket failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The upstream broke HTTP/1.1.
    #[error("{0}")]
    Protocol(&'static str),
    /// The upstream closed the connection before sending anything back.
    #[error("connection closed before a response")]
    Closed,
    /// The upstream closed the connection in the middle of a response.
    #[error("connection closed in the middle of a response")]
    Truncated,
    /// The request body failed (the client's stream, or its length against its framing).
    #[error("request body: {0}")]
    RequestBody(Box<BodyError>),
}

/// Where a connection goes when its response has been read to the end.
pub trait Home: Send + Sync {
    /// Takes back a connection that may carry another request.
    fn checkin(&self, conn: Box<Conn>);
}

/// One upstream HTTP/1.1 connection and the buffers it reuses.
pub struct Conn {
    io: TcpStream,
    /// Kept while the connection is idle for a moment: the response's head and body still share
    /// it when it comes home, and a buffer the thread lent would be freed with them, not given
    /// back. The pool lets go of it once the connection has been idle a while (`slim`).
    rbuf: BytesMut,
    wbuf: Vec<u8>,
    /// How the heads written on it spell header names.
    case: case::HeaderCase,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("io", &self.io).finish()
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // The heap trim waits for closes like this one (memory.rs).
        crate::memory::released(1);
    }
}

/// A failed exchange; `replay` holds the whole request when none of the response arrived and
/// the request is still whole in memory, so it may be sent again on a fresh connection.
#[derive(Debug)]
pub struct Failed {
    /// What went wrong.
    pub error: Error,
    /// The request, encoded, if it can go again.
    pub replay: Option<Replay>,
}

/// An encoded request that can be sent again.
#[derive(Debug)]
pub struct Replay {
    bytes: Vec<u8>,
    head_request: bool,
}

impl Conn {
    /// A connection ready for its first request.
    pub fn new(io: TcpStream, case: case::HeaderCase) -> Box<Self> {
        Box::new(Self {
            io,
            rbuf: BytesMut::new(),
            wbuf: Vec::new(),
            case,
        })
    }

    /// Whether an idle connection can still carry a request: the upstream has neither closed it
    /// nor sent anything unasked. Costs no system call unless the socket became readable.
    pub fn is_open(&self) -> bool {
        let mut probe = [0u8; 1];
        matches!(self.io.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Lets go of the buffers of a connection that sat idle: it needs none until its next
    /// request, which borrows a read buffer from the thread (`read_room`). Up to ~20 KiB per
    /// idle connection; returns whether it held any.
    pub fn slim(&mut self) -> bool {
        let held = self.rbuf.capacity() + self.wbuf.capacity();
        read_room::give_back(&mut self.rbuf);
        self.wbuf = Vec::new();
        held > self.rbuf.capacity()
    }

    fn make_room(&mut self) {
        read_room::make(&mut self.rbuf, MIN_READ, READ_SIZE);
    }

    async fn fill(&mut self) -> io::Result<usize> {
        self.make_room();
        self.io.read_buf(&mut self.rbuf).await
    }

    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.make_room();
        tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut self.rbuf)
    }
}

/// Sends the request `parts` and `body` on `conn` and returns the response head; its body
/// streams off the connection, which goes `home` once the body has been read (at once if it was
/// already buffered).
///
/// The head is dropped as soon as it is encoded, while it is still in the CPU's cache: held
/// until the response came back it was cold by then, with a few hundred requests in flight,
/// and its drop reads every field. A replay resends the encoded bytes.
pub async fn send(
    mut conn: Box<Conn>,
    mut parts: Box<Parts>,
    mut body: ProxyBody,
    home: Arc<dyn Home>,
) -> Result<Response<ProxyBody>, Failed> {
    let replayable = parts.method.is_idempotent();
    let head_request = parts.method == Method::HEAD;
    conn.wbuf.clear();
    let empty = body.is_end_stream();
    let framing = encode::head(
        &parts,
        empty,
        body.size_hint().exact(),
        conn.case,
        &mut conn.wbuf,
    );
    spare_maps::give_back(std::mem::take(&mut parts.headers));
    drop(parts);
    // A body already whole in memory goes out with the head: one write, and the request can be
    // sent again as it is.
    let whole = match (&mut body, framing) {
        (_, Framing::Done | Framing::Length(0)) => true,
        (ProxyBody::Full(b), Framing::Length(n))
            if b.as_ref().map(|b| b.len() as u64) == Some(n) =>
        {
            if let Some(b) = b.take() {
                conn.wbuf.extend_from_slice(&b);
            }
            true
        }
        _ => false,
    };
    if whole {
        return exchange(conn, head_request, replayable, home).await;
    }
    let complete = match send_streaming(&mut conn, &mut body, framing).await {
        Ok(complete) => complete,
        Err(error) => {
            return Err(Failed {
                error,
                replay: None,
            })
        }
    };
    drop(body);
    match read_head(&mut conn, head_request).await {
        Ok(head) => Ok(respond(conn, head, complete, home)),
        Err(error) => Err(Failed {
            error,
            replay: None,
        }),
    }
}

/// Sends a request again (on a fresh connection) after [`send`] failed with a replay.
pub async fn resend(
    mut conn: Box<Conn>,
    replay: Replay,
    home: Arc<dyn Home>,
) -> Result<Response<ProxyBody>, Failed> {
    conn.wbuf = replay.bytes;
    exchange(conn, replay.head_request, false, home).await
}

/// Writes the buffered request and reads the answer. On failure the request is offered for a
/// replay if not a byte of it left (the first write failed), or if nothing came back and it is
/// `idempotent`:
/// the upstream closed or reset the connection, as a pooled connection's peer may at any
/// moment, and an idempotent request may safely go again even had it been acted on.
async fn exchange(
    mut conn: Box<Conn>,
    head_request: bool,
    idempotent: bool,
    home: Arc<dyn Home>,
) -> Result<Response<ProxyBody>, Failed> {
    // Counted, not `write_all`: a request whose first bytes left may have been acted on (a
    // server that reads a POST's head, starts work and resets), so only one that never left
    // is resent whatever its method.
    let mut written = 0;
    let wrote = loop {
        if written == conn.wbuf.len() {
            break Ok(());
        }
        match conn.io.write(&conn.wbuf[written..]).await {
            Ok(0) => break Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => written += n,
            Err(e) => break Err(e),
        }
    };
    let (read, unsent) = match wrote {
        Ok(()) => (read_head(&mut conn, head_request).await, false),
        Err(e) => (Err(Error::Io(e)), written == 0),
    };
    match read {
        Ok(head) => Ok(respond(conn, head, true, home)),
        Err(error) => {
            let silent = conn.rbuf.is_empty() && matches!(error, Error::Io(_) | Error::Closed);
            let replay = (unsent || (silent && idempotent)).then(|| Replay {
                bytes: std::mem::take(&mut conn.wbuf),
                head_request,
            });
            Err(Failed { error, replay })
        }
    }
}

/// Streams a body that is not whole in memory after the head. Returns whether all of it was
/// sent: an upstream that answers early (a 413, a redirect) gets no more of it. Every write
/// and every wait for the next frame also watches for that answer, so an upstream that answers
/// and stops reading is heard even while a write of ours waits on it.
async fn send_streaming(
    conn: &mut Conn,
    body: &mut ProxyBody,
    framing: Framing,
) -> Result<bool, Error> {
    let (mut rd, mut wr) = conn.io.split();
    let (rbuf, wbuf) = (&mut conn.rbuf, &mut conn.wbuf);
    tokio::select! {
        biased;
        r = answered(&mut rd, rbuf) => return r.map(|()| false),
        w = wr.write_all(wbuf) => w?,
    }
    let mut writer = BodyWriter::new(
        match framing {
            Framing::Length(n) => Some(n),
            _ => None,
        },
        conn.case,
    );
    let mut trailers: Option<HeaderMap> = None;
    loop {
        let frame = tokio::select! {
            biased;
            r = answered(&mut rd, rbuf) => return r.map(|()| false),
            f = poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)) => f,
        };
        let frame = match frame {
            None => break,
            Some(Err(e)) => return Err(Error::RequestBody(Box::new(e))),
            Some(Ok(f)) => f,
        };
        let wrote = match frame.into_data() {
            Ok(data) => tokio::select! {
                biased;
                r = answered(&mut rd, rbuf) => return r.map(|()| false),
                w = writer.data(&mut wr, wbuf, data) => w,
            },
            Err(f) => {
                trailers = f.into_trailers().ok();
                Ok(())
            }
        };
        wrote.map_err(body_write_failed)?;
    }
    tokio::select! {
        biased;
        r = answered(&mut rd, rbuf) => return r.map(|()| false),
        w = writer.finish(&mut wr, wbuf, trailers.as_ref()) => w.map_err(body_write_failed)?,
    }
    Ok(true)
}

/// Reads what the upstream sends while the request is still going out, until a final response
/// head is in `rbuf` (interim 1xx heads are dropped). Cancel-safe: bytes read stay in `rbuf`.
async fn answered(rd: &mut ReadHalf<'_>, rbuf: &mut BytesMut) -> Result<(), Error> {
    loop {
        match rd.read_buf(rbuf).await {
            Ok(0) => return Err(Error::Closed),
            Ok(_) if decode::final_head_arrived(rbuf) => return Ok(()),
            Ok(_) => {}
            Err(e) => return Err(Error::Io(e)),
        }
    }
}

fn body_write_failed(e: WriteError) -> Error {
    match e {
        WriteError::Io(e) => Error::Io(e),
        WriteError::Longer => Error::RequestBody(Box::new(BodyError::Length(
            "longer than its Content-Length",
        ))),
        WriteError::Shorter => Error::RequestBody(Box::new(BodyError::Length(
            "shorter than its Content-Length",
        ))),
    }
}

async fn read_head(conn: &mut Conn, head_request: bool) -> Result<Head, Error> {
    loop {
        if !conn.rbuf.is_empty() {
            let rbuf = &mut conn.rbuf;
            if let Some(head) =
                names::of_responses(|names| decode::response(rbuf, head_request, names))?
            {
                return Ok(head);
            }
        }
        if conn.fill().await? == 0 {
            return Err(if conn.rbuf.is_empty() {
                Error::Closed
            } else {
                Error::Truncated
            });
        }
    }
}

/// The response for `head`. A body already in the buffer (most small ones) is taken whole and the
/// connection goes home at once; a longer one streams off the connection.
fn respond(
    mut conn: Box<Conn>,
    head: Head,
    request_sent: bool,
    home: Arc<dyn Home>,
) -> Response<ProxyBody> {
    let keep_alive = head.keep_alive && request_sent;
    let body = match head.framing {
        BodyFraming::Empty => {
            checkin(conn, keep_alive, &*home);
            ProxyBody::Empty
        }
        BodyFraming::Length(n) if conn.rbuf.len() as u64 >= n => {
            // n <= rbuf.len(), a usize.
            let data = conn.rbuf.split_to(n as usize).freeze();
            checkin(conn, keep_alive, &*home);
            ProxyBody::Full(Some(data))
        }
        framing => ProxyBody::H1(Box::new(ResponseBody::new(conn, home, framing, keep_alive))),
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = head.status;
    *resp.version_mut() = head.version;
    *resp.headers_mut() = head.headers;
    resp
}

fn checkin(conn: Box<Conn>, keep_alive: bool, home: &dyn Home) {
    // Bytes after the response were never asked for: the connection is out of step.
    if keep_alive && conn.rbuf.is_empty() {
        home.checkin(conn);
    }
}
