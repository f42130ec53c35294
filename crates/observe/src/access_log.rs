//! The access log sink and the per-worker buffer in front of it.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::sync::{Arc, Mutex};

use crate::format::{Entry, Stamp};
use crate::options::{AccessLogOptions, LogTarget};

/// A worker's buffer is written out once it holds this much (and at least once a second).
const FLUSH_AT: usize = 64 * 1024;

/// The process-wide access log. Workers write whole buffers under a lock taken about once
/// per 64 KiB, so contention is negligible; USR1 reopens the file for logrotate.
#[derive(Debug)]
pub struct AccessLog {
    options: AccessLogOptions,
    file: Mutex<Option<File>>,
}

impl AccessLog {
    /// Open the configured target (creating the file, appending).
    pub fn open(options: &AccessLogOptions) -> io::Result<Arc<AccessLog>> {
        let file = match &options.target {
            LogTarget::File(path) => Some(open_append(path)?),
            _ => None,
        };
        Ok(Arc::new(AccessLog {
            options: options.clone(),
            file: Mutex::new(file),
        }))
    }

    /// Reopen the file (after logrotate moved it away). A failure keeps the old file.
    pub fn reopen(&self) -> io::Result<()> {
        if let LogTarget::File(path) = &self.options.target {
            let new = open_append(path)?;
            *self.file.lock().unwrap_or_else(|e| e.into_inner()) = Some(new);
        }
        Ok(())
    }

    fn write_all(&self, bytes: &[u8]) -> io::Result<()> {
        match &self.options.target {
            LogTarget::Off => Ok(()),
            LogTarget::Stdout => io::stdout().lock().write_all(bytes),
            LogTarget::Stderr => io::stderr().lock().write_all(bytes),
            LogTarget::File(_) => match &mut *self.file.lock().unwrap_or_else(|e| e.into_inner()) {
                Some(f) => f.write_all(bytes),
                None => Ok(()),
            },
        }
    }
}

fn open_append(path: &std::path::Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// A worker's access-log buffer. Not shared: one per worker thread.
#[derive(Debug)]
pub struct LogBuffer {
    log: Arc<AccessLog>,
    buf: Vec<u8>,
    stamp: Stamp,
}

impl LogBuffer {
    pub fn new(log: Arc<AccessLog>) -> LogBuffer {
        LogBuffer {
            log,
            buf: Vec::new(),
            stamp: Stamp::default(),
        }
    }

    /// Whether anything is logged at all (skip building entries when off).
    pub fn enabled(&self) -> bool {
        self.log.options.target != LogTarget::Off
    }

    /// Switch to another sink (after a reload changed the log settings).
    pub fn set_sink(&mut self, log: Arc<AccessLog>) {
        self.flush();
        self.log = log;
    }

    /// Append one line; writes the buffer out when it is full.
    /// Whether the format records request durations (JSON does; Combined and Common do not,
    /// and then the pipeline need not read the clock for them).
    pub fn wants_duration(&self) -> bool {
        self.log.options.format == crate::LogFormat::Json
    }

    pub fn record(&mut self, entry: &Entry<'_>) {
        if !self.enabled() {
            return;
        }
        entry.write(self.log.options.format, &mut self.stamp, &mut self.buf);
        if self.buf.len() >= FLUSH_AT {
            self.flush();
        }
    }

    /// Write out whatever is buffered (the once-a-second tick and shutdown call this).
    pub fn flush(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        if let Err(e) = self.log.write_all(&self.buf) {
            tracing::error!("access log write failed: {e}");
        }
        self.buf.clear();
    }
}

impl Drop for LogBuffer {
    fn drop(&mut self) {
        self.flush();
    }
}
