//! Group commit for a file of numbered records that several threads append to: each
//! appender writes its record, then waits until it is on disk (`fdatasync`). Appenders that
//! wrote while a flush ran are all carried by the next flush (it starts after their
//! writes): one `fdatasync` for them all instead of one each. Used by the SPECweb99 post
//! log and the WebAssembly host's journals.

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The flush mark of one file: records up to the number inside are on disk. Held while
/// flushing, so one thread flushes at a time and the others wait for it.
pub struct GroupCommit {
    durable: Mutex<u64>,
    /// Flushes done (`fdatasync` calls).
    flushes: AtomicU64,
}

impl GroupCommit {
    /// A file whose first `durable` records are on disk.
    pub fn new(durable: u64) -> GroupCommit {
        GroupCommit {
            durable: Mutex::new(durable),
            flushes: AtomicU64::new(0),
        }
    }

    fn mark(&self) -> MutexGuard<'_, u64> {
        self.durable.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Return once record `n` (written) is on disk (blocking): at once if a flush that
    /// began after it was written has ended, else after one more flush. `written` gives
    /// the file and the number of the last record written now (taken under the flush mark,
    /// so every record written before the flush begins is carried by it).
    pub fn wait(
        &self,
        n: u64,
        written: impl FnOnce() -> (std::sync::Arc<File>, u64),
    ) -> io::Result<()> {
        let mut durable = self.mark();
        if *durable >= n {
            return Ok(());
        }
        let (file, upto) = written();
        file.sync_data()?;
        self.flushes.fetch_add(1, Ordering::Relaxed);
        *durable = upto;
        Ok(())
    }

    /// Empty the file with `empty` (which flushes it itself) while no flush runs, then
    /// start the numbering again: no record is on disk. Callers that also lock the file's
    /// own state take that lock inside `empty`, after the flush mark, as [`wait`] does.
    ///
    /// [`wait`]: GroupCommit::wait
    pub fn reset(&self, empty: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let mut durable = self.mark();
        empty()?;
        *durable = 0;
        Ok(())
    }

    /// Flushes done so far.
    pub fn flushes(&self) -> u64 {
        self.flushes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn one_flush_carries_every_record_written_before_it() {
        let tmp = tempfile::tempfile().unwrap();
        let file = Arc::new(tmp);
        let g = GroupCommit::new(0);
        // Records 1 to 3 written; the first waiter flushes for all three.
        for n in 1..=3 {
            g.wait(n, || (file.clone(), 3)).unwrap();
        }
        assert_eq!(g.flushes(), 1);
        g.wait(4, || (file.clone(), 4)).unwrap();
        assert_eq!(g.flushes(), 2);
        // After a reset, record 1 is a new one: not taken as on disk.
        g.reset(|| Ok(())).unwrap();
        g.wait(1, || (file.clone(), 1)).unwrap();
        assert_eq!(g.flushes(), 3);
        // A failed reset leaves the mark as it was.
        assert!(g.reset(|| Err(io::Error::other("no"))).is_err());
        g.wait(1, || unreachable!("record 1 is on disk")).unwrap();
    }
}
