//! The request a module is handed: what the server passes (method, target, path,
//! version, client, body length) and what follows from it (the query, a parameter, the
//! mount's prefix).

use std::fmt;
use std::sync::OnceLock;

use crate::bindings::ramjet::module::http;

/// One request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: Method,
    /// The target as sent: path and query, still percent-encoded.
    pub uri: String,
    /// The decoded, normalised path (bytes: it need not be UTF-8).
    pub path: Vec<u8>,
    pub version: Version,
    /// The client's address, `ip:port`.
    pub client: String,
    /// The declared body length, when the client gave one.
    pub content_length: Option<u64>,
}

impl Request {
    /// The query without `?`, undecoded (what follows the first `?` of the target).
    pub fn query(&self) -> Option<&str> {
        self.uri.split_once('?').map(|(_, q)| q)
    }

    /// The undecoded value of query parameter `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query()?
            .split('&')
            .filter_map(|kv| kv.split_once('=').or(Some((kv, ""))))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v)
    }

    /// The path prefix of the location the module is mounted on (asked of the server once
    /// per instance: an instance serves one location).
    pub fn mount(&self) -> &'static str {
        static MOUNT: OnceLock<String> = OnceLock::new();
        MOUNT.get_or_init(http::mount)
    }
}

impl From<http::Request> for Request {
    fn from(r: http::Request) -> Request {
        Request {
            method: r.method.into(),
            uri: r.uri,
            path: r.path,
            version: r.version.into(),
            client: r.client,
            content_length: r.content_length,
        }
    }
}

/// The request's method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Options,
    Patch,
    /// Any other token, as sent.
    Other(String),
}

impl Method {
    /// The token, e.g. `GET`.
    pub fn as_str(&self) -> &str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
            Method::Patch => "PATCH",
            Method::Other(token) => token,
        }
    }
}

impl From<http::Method> for Method {
    fn from(m: http::Method) -> Method {
        match m {
            http::Method::Get => Method::Get,
            http::Method::Head => Method::Head,
            http::Method::Post => Method::Post,
            http::Method::Put => Method::Put,
            http::Method::Delete => Method::Delete,
            http::Method::Options => Method::Options,
            http::Method::Patch => Method::Patch,
            http::Method::Other(token) => Method::Other(token),
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for Method {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Method {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// The request's HTTP version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
    Http2,
}

impl Version {
    /// `HTTP/1.0`, `HTTP/1.1` or `HTTP/2.0`, as CGI's `SERVER_PROTOCOL` has it.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
            Version::Http2 => "HTTP/2.0",
        }
    }
}

impl From<http::Version> for Version {
    fn from(v: http::Version) -> Version {
        match v {
            http::Version::Http10 => Version::Http10,
            http::Version::Http11 => Version::Http11,
            http::Version::Http2 => Version::Http2,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
