//! `[file_cache]`: the per-worker open-file cache.

use std::time::Duration;

use serde::Deserialize;

use crate::resolved::FileCacheOptions;
use crate::units::{Seconds, Size};

const DEFAULT_CACHE_ENTRIES: usize = 4096;
const DEFAULT_CACHE_MEMORY: u64 = 64 << 20;
/// Files up to this size are served from memory with one writev; larger go by sendfile with
/// the head sent MSG_MORE (and an fstat first, so the head matches the file). Measured
/// (1 worker, `ramjet bench -c 50`, requests per server-CPU-second, 3 rounds alternating):
/// a 21.5 KB file from memory 93,293 against 75,309 by sendfile (1.24x, every round), so
/// the threshold is 32 KiB; 4 KB and 8 KB were 9-28% better from memory in earlier runs.
const DEFAULT_SMALL_FILE_MAX: u64 = 32 << 10;
/// nginx open_file_cache_valid is 60 s; one second keeps edits visible almost at once.
const DEFAULT_CACHE_VALID: Duration = Duration::from_secs(1);

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFileCache {
    /// Open files (with metadata and response head) kept per worker.
    pub entries: Option<usize>,
    /// Bytes of small-file bodies kept in memory per worker.
    pub memory: Option<Size>,
    /// Files up to this size are served from memory.
    pub small_file_max: Option<Size>,
    /// How long a cached entry is trusted before its file is checked for changes.
    pub valid: Option<Seconds>,
    /// Watch cached files' directories (inotify) and re-check a file as soon as it changes.
    pub watch: Option<bool>,
}

/// The cache's sizes and validity, defaults where unset.
pub(crate) fn resolve(c: RawFileCache) -> FileCacheOptions {
    FileCacheOptions {
        entries: c.entries.unwrap_or(DEFAULT_CACHE_ENTRIES).max(1),
        memory: c.memory.map_or(DEFAULT_CACHE_MEMORY, |s| s.0),
        small_file_max: c.small_file_max.map_or(DEFAULT_SMALL_FILE_MAX, |s| s.0),
        valid: c.valid.map_or(DEFAULT_CACHE_VALID, |s| s.0),
        watch: c.watch.unwrap_or(true),
    }
}
