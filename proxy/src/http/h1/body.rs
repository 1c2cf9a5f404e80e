//! A response body streamed straight off a pooled upstream connection; the connection goes back
//! to its pool once the body has been read to its end, and is closed if the body is dropped early.

use std::{
    pin::Pin,
    sync::Arc,
    task::{ready, Context, Poll},
};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::{
    chunked::{Chunked, Step},
    decode::BodyFraming,
    Conn, Error, Home,
};

#[derive(Debug)]
enum Kind {
    Length(u64),
    Chunked(Chunked),
    UntilClose,
    Done,
}

/// The rest of a response body, still on its connection.
pub struct ResponseBody {
    conn: Option<Box<Conn>>,
    home: Arc<dyn Home>,
    kind: Kind,
    keep_alive: bool,
}

impl std::fmt::Debug for ResponseBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseBody")
            .field("kind", &self.kind)
            .finish()
    }
}

/// What one decoding step over the buffered bytes gave.
enum Got {
    Frame(Frame<Bytes>),
    End,
    More,
}

impl ResponseBody {
    pub(super) fn new(
        conn: Box<Conn>,
        home: Arc<dyn Home>,
        framing: BodyFraming,
        keep_alive: bool,
    ) -> Self {
        let kind = match framing {
            BodyFraming::Length(n) => Kind::Length(n),
            BodyFraming::Chunked => Kind::Chunked(Chunked::default()),
            BodyFraming::UntilClose => Kind::UntilClose,
            BodyFraming::Empty => Kind::Done,
        };
        let mut body = Self {
            conn: Some(conn),
            home,
            kind,
            keep_alive,
        };
        if matches!(body.kind, Kind::Done) {
            body.finish();
        }
        body
    }

    /// Decodes what the connection has buffered.
    fn step(&mut self) -> Result<Got, Error> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(Got::End);
        };
        let buf = &mut conn.rbuf;
        let (got, ended) = match &mut self.kind {
            Kind::Done => (Got::End, false),
            Kind::Length(_) | Kind::UntilClose if buf.is_empty() => (Got::More, false),
            Kind::Length(rest) => {
                let n = (*rest).min(buf.len() as u64);
                *rest -= n;
                // n <= buf.len(), a usize.
                let data = buf.split_to(n as usize).freeze();
                (Got::Frame(Frame::data(data)), *rest == 0)
            }
            Kind::UntilClose => (Got::Frame(Frame::data(buf.split().freeze())), false),
            Kind::Chunked(c) => match c.step(buf)? {
                Step::Data(d) => (Got::Frame(Frame::data(d)), false),
                Step::Trailers(t) => (Got::Frame(Frame::trailers(t)), true),
                Step::End => (Got::End, true),
                Step::More => (Got::More, false),
            },
        };
        if ended {
            self.finish();
        }
        Ok(got)
    }

    /// The body ended cleanly: the connection may carry the next request.
    fn finish(&mut self) {
        self.kind = Kind::Done;
        if let Some(conn) = self.conn.take() {
            super::checkin(conn, self.keep_alive, &*self.home);
        }
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = self.get_mut();
        loop {
            match this.step() {
                Err(e) => {
                    this.conn = None;
                    this.kind = Kind::Done;
                    return Poll::Ready(Some(Err(e)));
                }
                Ok(Got::Frame(f)) => return Poll::Ready(Some(Ok(f))),
                Ok(Got::End) => return Poll::Ready(None),
                Ok(Got::More) => {}
            }
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match ready!(conn.poll_fill(cx)) {
                Ok(0) => {
                    this.conn = None;
                    let until_close = matches!(this.kind, Kind::UntilClose);
                    this.kind = Kind::Done;
                    return Poll::Ready(if until_close {
                        None
                    } else {
                        Some(Err(Error::Truncated))
                    });
                }
                Ok(_) => {}
                Err(e) => {
                    this.conn = None;
                    this.kind = Kind::Done;
                    return Poll::Ready(Some(Err(Error::Io(e))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.kind, Kind::Done)
    }

    fn size_hint(&self) -> SizeHint {
        match self.kind {
            Kind::Length(n) => SizeHint::with_exact(n),
            Kind::Done => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}
