//! One HTTP/1.x exchange on an open connection: read and validate a response with the
//! server's own `http1` codec. Shared by the closed and open loops.

use std::time::Duration;

use ramjet_http1::{parse_response_head, BodyDecoder, BodyFraming, ResponseParse};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// Read buffer growth per fill.
pub(crate) const READ_CHUNK: usize = 64 * 1024;

/// Why one exchange failed.
pub(crate) enum Failure {
    Timeout,
    Reset,
    ShortBody,
    Invalid,
}

/// A complete response.
pub(crate) struct Answer {
    pub status: u16,
    /// Bytes read for it (head and body as framed).
    pub bytes: u64,
    pub body_len: u64,
    /// The server lets the connection be reused.
    pub keep_alive: bool,
}

/// Read one response from `stream` (using and refilling `buf`, which may already hold bytes
/// of it); bytes after the response stay in `buf` for the next one.
pub(crate) async fn read_response(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    timeout: Duration,
) -> Result<Answer, Failure> {
    let head = loop {
        match parse_response_head(buf, false) {
            ResponseParse::Complete(h) => break h,
            ResponseParse::Invalid => return Err(Failure::Invalid),
            ResponseParse::Partial => {
                if fill(stream, buf, timeout).await? == 0 {
                    return Err(Failure::Reset);
                }
            }
        }
    };
    buf.drain(..head.head_len);
    let mut bytes = head.head_len as u64;
    let mut body = 0u64;
    if head.until_close {
        loop {
            body += buf.len() as u64;
            buf.clear();
            if fill(stream, buf, timeout).await? == 0 {
                break;
            }
        }
        return Ok(Answer {
            status: head.status,
            bytes: bytes + body,
            body_len: body,
            keep_alive: false,
        });
    }
    if head.framing != BodyFraming::None {
        let mut decoder = BodyDecoder::new(head.framing, u64::MAX).map_err(|_| Failure::Invalid)?;
        loop {
            while !buf.is_empty() && !decoder.is_done() {
                let step = decoder.decode(buf).map_err(|_| Failure::Invalid)?;
                body += step.data.len() as u64;
                bytes += step.consumed as u64;
                buf.drain(..step.consumed);
            }
            if decoder.is_done() {
                break;
            }
            if fill(stream, buf, timeout).await? == 0 {
                return Err(Failure::ShortBody);
            }
        }
    }
    Ok(Answer {
        status: head.status,
        bytes,
        body_len: body,
        keep_alive: head.keep_alive,
    })
}

async fn fill(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    timeout: Duration,
) -> Result<usize, Failure> {
    buf.reserve(READ_CHUNK);
    match tokio::time::timeout(timeout, stream.read_buf(buf)).await {
        Ok(Ok(n)) => Ok(n),
        Ok(Err(_)) => Err(Failure::Reset),
        Err(_) => Err(Failure::Timeout),
    }
}
