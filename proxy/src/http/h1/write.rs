//! Writes an HTTP/1 message body after its head, frame by frame: raw against a declared length,
//! chunked with the trailer section at the end, or raw until the connection closes (HTTP/1.0).
//! Shared by the upstream client (request bodies) and the downstream fast path (response bodies).

use super::case::HeaderCase;
use bytes::{Buf, Bytes};
use http::HeaderMap;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::encode;

/// Why a body could not be written.
#[derive(Debug)]
pub enum WriteError {
    /// The socket failed.
    Io(std::io::Error),
    /// More bytes than the declared length.
    Longer,
    /// The body ended before the declared length.
    Shorter,
}

impl From<std::io::Error> for WriteError {
    fn from(e: std::io::Error) -> Self {
        WriteError::Io(e)
    }
}

/// The framing state of one body being written.
#[derive(Debug)]
pub struct BodyWriter {
    delimit: Delimit,
}

/// How the reader finds the body's end.
#[derive(Debug)]
enum Delimit {
    /// Its length: the bytes still owed.
    Length(u64),
    /// The last chunk; its trailers' names spelled in this case (inside the variant, where it
    /// takes no room: a writer lives in every response's future).
    Chunked(HeaderCase),
    /// The close of the connection (HTTP/1.0 has no chunked coding).
    Close,
}

impl BodyWriter {
    /// A writer for a body of exactly `length` bytes, or chunked when `None` (its trailers'
    /// names spelled in `case`).
    pub fn new(length: Option<u64>, case: HeaderCase) -> Self {
        let delimit = length.map_or(Delimit::Chunked(case), Delimit::Length);
        Self { delimit }
    }

    /// A writer for a body that the connection's close ends; trailers are dropped.
    pub fn until_close() -> Self {
        Self {
            delimit: Delimit::Close,
        }
    }

    /// Writes one data frame; `scratch` holds the chunk-size line.
    pub async fn data<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        scratch: &mut Vec<u8>,
        data: Bytes,
    ) -> Result<(), WriteError> {
        if data.is_empty() {
            return Ok(());
        }
        match &mut self.delimit {
            Delimit::Length(n) => {
                *n = n.checked_sub(data.len() as u64).ok_or(WriteError::Longer)?;
                io.write_all(&data).await?;
            }
            Delimit::Close => io.write_all(&data).await?,
            Delimit::Chunked(_) => {
                encode::chunk_size_line(data.len(), scratch);
                let mut out = Buf::chain(Buf::chain(&scratch[..], data), &b"\r\n"[..]);
                io.write_all_buf(&mut out).await?;
            }
        }
        Ok(())
    }

    /// The body ended: checks its length, or writes the last chunk with `trailers` (the close
    /// ends a close-delimited body: nothing to write).
    pub async fn finish<W: AsyncWrite + Unpin>(
        self,
        io: &mut W,
        scratch: &mut Vec<u8>,
        trailers: Option<&HeaderMap>,
    ) -> Result<(), WriteError> {
        match self.delimit {
            Delimit::Length(0) | Delimit::Close => Ok(()),
            Delimit::Length(_) => Err(WriteError::Shorter),
            Delimit::Chunked(case) => {
                encode::last_chunk(trailers, case, scratch);
                io.write_all(scratch).await?;
                Ok(())
            }
        }
    }
}
