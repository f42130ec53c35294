//! Write a ramjet module in Rust: implement [`Handler`], name your type with [`export!`],
//! build for `wasm32-wasip2`, mount the `.wasm` file with `module = "wasm"`.
//!
//! ```ignore
//! use ramjet_module::{respond, write, Handler, Request};
//!
//! struct Hi;
//!
//! impl Handler for Hi {
//!     fn handle(req: Request) {
//!         respond(200, &[("content-type", b"text/plain")]);
//!         write(format!("hi, {}\n", req.client).as_bytes());
//!     }
//! }
//!
//! ramjet_module::export!(Hi);
//! ```
//!
//! ramjet calls `handle` once per request, on an instance that may have answered earlier
//! requests on the same worker: globals last from one request to the next on it (a cache
//! may live there), but each worker has its own instances, so what must be shared goes in
//! [`store`]. An instance has a memory cap and a CPU budget; a panic, a trap or running
//! past either answers 500, is logged under the module's name, and the instance is
//! dropped.

#[doc(hidden)]
// The export's request is passed flat, as twelve arguments.
#[allow(clippy::too_many_arguments)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "module",
        path: "../../wit",
        pub_export_macro: true,
        default_bindings_module: "ramjet_module::bindings",
        // Header fields and other lists are handed to the server as borrowed slices: no
        // copy of each name and value in the module before the call.
        ownership: Borrowing {
            duplicate_if_necessary: true
        },
    });
}

use bindings::ramjet::module::{
    files as wit_files, host, http, journal as wit_journal, upstream as wit_upstream,
};

mod request;

pub use http::BodyError;
pub use request::{Method, Request, Version};

/// A module: what it does with each request.
pub trait Handler {
    fn handle(req: Request);
}

/// The world's export, for a [`Handler`] (what [`export!`] names).
#[doc(hidden)]
pub struct Export<T>(std::marker::PhantomData<T>);

impl<T: Handler> bindings::Guest for Export<T> {
    fn handle(req: http::Request) {
        T::handle(req.into());
    }
}

/// Name the type that implements [`Handler`]: `ramjet_module::export!(MyModule);`.
#[macro_export]
macro_rules! export {
    ($t:ident) => {
        type RamjetModuleExport = $crate::Export<$t>;
        $crate::bindings::export!(RamjetModuleExport with_types_in $crate::bindings);
    };
}

/// Begin the answer with `status` and header fields (once; `Date`, `Server`, framing are
/// the server's).
pub fn respond(status: u16, headers: &[(&str, &[u8])]) {
    http::respond(status, headers);
}

/// Append bytes to the body.
pub fn write(bytes: &[u8]) {
    http::write(bytes);
}

/// The whole answer at once: status, header fields and body (one call to the server
/// instead of `respond` and `write`).
pub fn answer(status: u16, headers: &[(&str, &[u8])], body: &[u8]) {
    http::answer(status, headers, body);
}

/// Send what the body holds now and stream the rest (each later write waits for the
/// client).
pub fn flush() {
    http::flush();
}

/// The next piece of the request body (`None` at its end).
pub fn read_body(max: u32) -> Result<Option<Vec<u8>>, BodyError> {
    http::read_body(max)
}

/// Why the whole body could not be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WholeBody {
    TooLarge,
    Failed(BodyError),
}

/// The whole request body, refused past `limit` bytes.
pub fn body(limit: usize) -> Result<Vec<u8>, WholeBody> {
    let mut out = Vec::new();
    while let Some(piece) = read_body(64 << 10).map_err(WholeBody::Failed)? {
        if out.len() + piece.len() > limit {
            return Err(WholeBody::TooLarge);
        }
        out.extend_from_slice(&piece);
    }
    Ok(out)
}

/// The request's first header field called `name` (any case). Fields are fetched from the
/// server when asked for, so a module pays only for those it reads.
pub fn header(name: &str) -> Option<Vec<u8>> {
    http::header(name)
}

/// Every header field of the request, in order.
pub fn headers() -> Vec<(String, Vec<u8>)> {
    http::headers()
}

/// The value of the cookie `name` (from the first `Cookie` field that has it: over
/// HTTP/2 a client may send one field per cookie).
pub fn cookie(name: &str) -> Option<String> {
    let find = |v: &[u8]| {
        std::str::from_utf8(v)
            .ok()?
            .split(';')
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_string())
    };
    // The common cases, none or one field, without copying every header.
    let first = header("cookie")?;
    if let Some(found) = find(&first) {
        return Some(found);
    }
    headers()
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("cookie"))
        .find_map(|(_, v)| find(v))
}

/// The file trees the location grants (`files = { NAME = "/dir" }`), read-only.
pub mod files {
    use super::wit_files;
    pub use wit_files::FileError;

    /// The size of `path` in tree `tree`.
    pub fn size(tree: &str, path: &str) -> Result<u64, FileError> {
        wit_files::size(tree, path)
    }

    /// Append a range of the file (all of it from `offset` when `len` is `None`) to the
    /// body; the server sends it with sendfile, the module never holds its bytes.
    pub fn send(tree: &str, path: &str, offset: u64, len: Option<u64>) -> Result<u64, FileError> {
        wit_files::send(tree, path, offset, len)
    }

    /// Read up to `len` bytes from `offset`.
    pub fn read(tree: &str, path: &str, offset: u64, len: u32) -> Result<Vec<u8>, FileError> {
        wit_files::read(tree, path, offset, len)
    }

    /// Where `needle` occurs in the file (offsets, left to right, not overlapping, at most
    /// `max`): the server searches it, the module never reads it.
    pub fn find(tree: &str, path: &str, needle: &[u8], max: u32) -> Result<Vec<u64>, FileError> {
        wit_files::find(tree, path, needle, max)
    }
}

/// The journals the location grants (`journals = { NAME = "/path" }`): append-only files
/// of records, one line each, numbered in one sequence and on disk before `append`
/// returns; for what must outlive the process, such as an order taken.
pub mod journal {
    use super::wit_journal;
    pub use wit_journal::JournalError;

    /// Append `line` (ending with LF, none before) and wait until it is on disk; its
    /// number. With `number_at` (offset, width), the server writes the number into the
    /// line there first, right-aligned.
    pub fn append(
        name: &str,
        line: &[u8],
        number_at: Option<(u32, u32)>,
    ) -> Result<u64, JournalError> {
        wit_journal::append(name, line, number_at)
    }

    /// Records and bytes it holds.
    pub fn size(name: &str) -> Result<(u64, u64), JournalError> {
        wit_journal::size(name)
    }

    /// Append `len` bytes of it from `offset` to the body (sent with sendfile).
    pub fn send(name: &str, offset: u64, len: u64) -> Result<(), JournalError> {
        wit_journal::send(name, offset, len)
    }

    /// Empty it, durably.
    pub fn clear(name: &str) -> Result<(), JournalError> {
        wit_journal::clear(name)
    }
}

/// The upstreams the location grants (`upstreams = { NAME = "http://host:port" }`): HTTP
/// requests by name, the whole answer back. The module holds no socket and sees no
/// address; the server writes `Host`, the framing and `Connection`.
pub mod upstream {
    use super::wit_upstream;
    pub use wit_upstream::{Response, UpstreamError};

    /// Send `method path` with `headers` and `body` to the upstream `name`; its answer,
    /// the body up to `max` bytes.
    pub fn request(
        name: &str,
        method: &str,
        path: &str,
        headers: &[(&str, &[u8])],
        body: &[u8],
        max: u32,
    ) -> Result<Response, UpstreamError> {
        wit_upstream::request(name, method, path, headers, body, max)
    }
}

/// The location's key-value store, shared by all requests and workers of the mount.
pub mod store {
    use super::host;

    pub fn get(key: &str) -> Option<Vec<u8>> {
        host::get(key)
    }

    /// False past the limits (keys of 256 bytes, values of 64 KiB, 10,000 keys).
    pub fn set(key: &str, value: &[u8]) -> bool {
        host::set(key, value)
    }

    pub fn delete(key: &str) {
        host::delete(key)
    }
}

pub use host::Level;

/// A line in the server's log, under the module's name.
pub fn log(level: Level, message: &str) {
    host::log(level, message);
}

/// A setting from the location's `vars` table.
pub fn var(name: &str) -> Option<String> {
    host::var(name)
}
