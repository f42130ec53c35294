//! Storing an answer as it arrives: [`fill`] runs as a task of its own on the worker that
//! fetched, reading the origin's body as fast as it comes (not at the pace of the client
//! that asked first, who reads from the fill like everyone else and may leave without
//! stopping it), into the fill's pieces and, for a disk-bound answer, into its body file
//! (writes batched, on the blocking pool). When the body is complete and of its declared
//! length the object is replaced by its finished form (memory bytes, or the committed disk
//! file); a memory answer is then also written through to the disk tier, so it survives a
//! restart. A body that fails or comes short ends the fill in error: readers get an error
//! (their client sees a cut connection, never a short answer taken as whole) and nothing
//! is stored.

use std::sync::Arc;

use bytes::Bytes;
use ramjet_pipeline::BodySource;

use crate::disk::Disk;
use crate::fill::Fill;
use crate::object::{Object, Stored};
use crate::store::{Counts, Store};

/// Disk writes are batched to this size.
const WRITE_BATCH: usize = 512 << 10;

/// Where a fill's bytes are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    Memory,
    Disk,
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}

/// Read `src` into `fill` (object `object` of `key`), then store the finished object.
pub async fn fill(
    store: Arc<Store>,
    key: Box<[u8]>,
    object: Arc<Object>,
    fill: Arc<Fill>,
    mut src: Box<dyn BodySource>,
    tier: Tier,
) {
    let zone = store.zone();
    let mut storing = true;
    let mut disk: Option<(Arc<std::fs::File>, std::path::PathBuf)> = None;
    if tier == Tier::Disk {
        let dir = store.disk().map(|d| d.dir.clone());
        let hash = object.hash;
        let made = match dir {
            Some(dir) => blocking(move || Disk { dir }.create_body(hash)).await,
            None => None,
        };
        match made {
            Some(Ok(d)) => disk = Some(d),
            Some(Err(e)) => {
                store.disk_failed(&e);
                storing = false;
            }
            None => storing = false,
        }
        if !storing {
            store.update(&key, object.id, None);
        }
    }
    let mut pending: Vec<Bytes> = Vec::new();
    let mut pending_len = 0usize;
    let mut written = 0u64;
    let ok = loop {
        let piece = std::future::poll_fn(|cx| src.poll_next(cx)).await;
        let piece = match piece {
            Some(Ok(p)) => p,
            Some(Err(_)) => break false,
            None => break true,
        };
        if piece.is_empty() {
            continue;
        }
        fill.push(piece.clone());
        let received = fill.received();
        if storing && received > zone.max_object.max(object.meta.length) {
            // Larger than anything this cache keeps (a body of unknown length).
            storing = false;
            store.update(&key, object.id, None);
            fill.release();
        }
        if let (true, Some((file, _))) = (storing, &disk) {
            pending_len += piece.len();
            pending.push(piece);
            if pending_len >= WRITE_BATCH {
                match write(file.clone(), written, std::mem::take(&mut pending)).await {
                    Ok(n) => {
                        written += n;
                        fill.written(file, written);
                    }
                    Err(e) => {
                        store.disk_failed(&e);
                        storing = false;
                        store.update(&key, object.id, None);
                    }
                }
                pending_len = 0;
            }
        }
    };
    let received = fill.received();
    let whole = ok && fill.length.is_none_or(|l| l == received);
    if !whole || !storing {
        fill.finish(whole);
        if storing {
            store.update(&key, object.id, None);
        }
        if let Some((_, tmp)) = disk {
            let _ = blocking(move || std::fs::remove_file(tmp)).await;
        }
        return;
    }
    let mut meta = object.meta.clone();
    meta.length = received;
    match disk {
        Some((file, tmp)) => {
            let done = match write(file.clone(), written, pending).await {
                Ok(_) => {
                    let (hash, m, f) = (object.hash, meta.clone(), file.clone());
                    let dir = store.disk.as_ref().map(|d| d.dir.clone());
                    blocking(move || {
                        Disk {
                            dir: dir.unwrap_or_default(),
                        }
                        .commit(hash, &f, &tmp, &m)
                    })
                    .await
                    .unwrap_or_else(|| Err(std::io::Error::other("blocking pool gone")))
                }
                Err(e) => Err(e),
            };
            fill.finish(true);
            match done {
                Ok(()) => {
                    let o = object.with(
                        store.next_id(),
                        meta,
                        Stored::Disk(file.clone()),
                        Some(file),
                    );
                    if store.update(&key, object.id, Some(Arc::new(o))) {
                        Counts::add(&store.counts.stored, 1);
                    }
                }
                Err(e) => {
                    store.disk_failed(&e);
                    store.update(&key, object.id, None);
                }
            }
        }
        None => {
            fill.finish(true);
            let Some(bytes) = fill.whole() else {
                store.update(&key, object.id, None);
                return;
            };
            let o = Arc::new(object.with(store.next_id(), meta, Stored::Memory(bytes), None));
            if store.update(&key, object.id, Some(o.clone())) {
                Counts::add(&store.counts.stored, 1);
                write_through(store, key, o).await;
            }
        }
    }
}

/// Give a memory object a disk copy (it then survives a restart, and stays on disk when
/// memory evicts it).
pub async fn write_through(store: Arc<Store>, key: Box<[u8]>, o: Arc<Object>) {
    let (Some(dir), Stored::Memory(bytes)) = (store.disk().map(|d| d.dir.clone()), &o.body) else {
        return;
    };
    let (bytes, meta, hash) = (bytes.clone(), o.meta.clone(), o.hash);
    let done = blocking(move || {
        let d = Disk { dir };
        let (file, tmp) = d.create_body(hash)?;
        Disk::write(&file, 0, &bytes)?;
        d.commit(hash, &file, &tmp, &meta)?;
        Ok::<_, std::io::Error>(file)
    })
    .await;
    match done {
        Some(Ok(file)) => {
            let with_disk = o.with(store.next_id(), o.meta.clone(), o.body.clone(), Some(file));
            if !store.update(&key, o.id, Some(Arc::new(with_disk))) {
                // Replaced or purged meanwhile: the copy is not wanted.
                if let Some(d) = store.disk() {
                    let dir = d.dir.clone();
                    let _ = blocking(move || Disk { dir }.remove(hash)).await;
                }
            }
        }
        Some(Err(e)) => store.disk_failed(&e),
        None => {}
    }
}

async fn write(file: Arc<std::fs::File>, at: u64, pieces: Vec<Bytes>) -> std::io::Result<u64> {
    blocking(move || {
        let mut at2 = at;
        for p in &pieces {
            Disk::write(&file, at2, p)?;
            at2 += p.len() as u64;
        }
        Ok(at2 - at)
    })
    .await
    .unwrap_or_else(|| Err(std::io::Error::other("blocking pool gone")))
}
