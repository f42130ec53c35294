//! The static-file producer: path resolution beneath the document root, the per-worker
//! open-file cache, conditional and range requests, precompressed siblings, listings.
//!
//! Brief overview: [`StaticFiles`] implements [`ramjet_pipeline::Content`]. A request's path
//! is looked up in the worker's [`cache`]; a miss or an entry older than `file_cache.valid`
//! is (re)opened on the blocking pool by [`open`], which lets the kernel enforce that nothing
//! leaves the root. A cache entry is a `ramjet_pipeline::filters::Representation`, so the
//! pipeline's conditional and range filters shape the response; [`encoding`] picks a
//! precompressed sibling;
//! [`autoindex`] renders directory listings.
#![forbid(unsafe_code)]

mod autoindex;
mod cache;
mod encoding;
mod handler;
mod listing;
mod mime;
mod open;
mod watch;

pub use handler::StaticFiles;
