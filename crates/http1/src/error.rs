/// Why a request head (or body framing) was refused. Each kind has one status code and
/// says whether the connection must close afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Malformed request line, header syntax, obs-fold, bad Host, bad framing headers.
    BadRequest,
    /// Method token we do not implement at all.
    NotImplementedMethod,
    /// A transfer coding other than chunked.
    NotImplementedCoding,
    /// Request target longer than the limit.
    UriTooLong,
    /// Head larger than the limit, or too many fields.
    HeadersTooLarge,
    /// HTTP version we do not speak (well-formed, e.g. HTTP/2.0 on an HTTP/1 port).
    VersionNotSupported,
    /// Request body larger than the limit.
    PayloadTooLarge,
}

impl ErrorKind {
    /// The status code sent for this error.
    pub fn status(self) -> u16 {
        match self {
            ErrorKind::BadRequest => 400,
            ErrorKind::NotImplementedMethod | ErrorKind::NotImplementedCoding => 501,
            ErrorKind::UriTooLong => 414,
            ErrorKind::HeadersTooLarge => 431,
            ErrorKind::VersionNotSupported => 505,
            ErrorKind::PayloadTooLarge => 413,
        }
    }
}
