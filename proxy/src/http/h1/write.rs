//! Writes an HTTP/1 message body after its head, frame by frame: raw against a declared length,
//! or chunked with the trailer section at the end. Shared by the upstream client (request
//! bodies) and the downstream fast path (response bodies).

use bytes::{Buf, Bytes};
use http::HeaderMap;
use tokio::{io::AsyncWriteExt, net::TcpStream};

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
    /// Bytes still owed (length-delimited), or `None` for chunked.
    left: Option<u64>,
}

impl BodyWriter {
    /// A writer for a body of exactly `length` bytes, or chunked when `None`.
    pub fn new(length: Option<u64>) -> Self {
        Self { left: length }
    }

    /// Writes one data frame; `scratch` holds the chunk-size line.
    pub async fn data(
        &mut self,
        io: &mut TcpStream,
        scratch: &mut Vec<u8>,
        data: Bytes,
    ) -> Result<(), WriteError> {
        if data.is_empty() {
            return Ok(());
        }
        match &mut self.left {
            Some(n) => {
                *n = n.checked_sub(data.len() as u64).ok_or(WriteError::Longer)?;
                io.write_all(&data).await?;
            }
            None => {
                encode::chunk_size_line(data.len(), scratch);
                let mut out = Buf::chain(Buf::chain(&scratch[..], data), &b"\r\n"[..]);
                io.write_all_buf(&mut out).await?;
            }
        }
        Ok(())
    }

    /// The body ended: checks its length, or writes the last chunk with `trailers`.
    pub async fn finish(
        self,
        io: &mut TcpStream,
        scratch: &mut Vec<u8>,
        trailers: Option<&HeaderMap>,
    ) -> Result<(), WriteError> {
        match self.left {
            Some(0) => Ok(()),
            Some(_) => Err(WriteError::Shorter),
            None => {
                encode::last_chunk(trailers, scratch);
                io.write_all(scratch).await?;
                Ok(())
            }
        }
    }
}
