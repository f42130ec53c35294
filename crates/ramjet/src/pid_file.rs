//! `--pid-file PATH`: the pid of the process to signal (the server, or the `--processes`
//! parent that passes signals on), for logrotate and init scripts without systemd. Written
//! once the server listens (through a temporary file and a rename, so a reader never sees
//! half a number); removed at exit only if it still names this process, so an old process
//! ending after a USR2 upgrade does not remove the new one's.

use std::path::{Path, PathBuf};

/// The file, removed when dropped (if it is still ours).
pub(crate) struct PidFile {
    path: PathBuf,
    pid: u32,
}

impl PidFile {
    pub(crate) fn write(path: &Path) -> std::io::Result<PidFile> {
        let pid = std::process::id();
        let tmp = path.with_extension(format!("tmp.{pid}"));
        std::fs::write(&tmp, format!("{pid}\n"))?;
        std::fs::rename(&tmp, path)?;
        Ok(PidFile {
            path: path.to_path_buf(),
            pid,
        })
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let ours = std::fs::read_to_string(&self.path)
            .is_ok_and(|t| t.trim().parse::<u32>() == Ok(self.pid));
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_whole_and_removed_only_while_ours() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ramjet.pid");
        let f = PidFile::write(&p).unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            format!("{}\n", std::process::id())
        );
        drop(f);
        assert!(!p.exists());
        // Another process (an upgrade's new one) wrote it since: left alone.
        let f = PidFile::write(&p).unwrap();
        std::fs::write(&p, "1\n").unwrap();
        drop(f);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "1\n");
    }
}
