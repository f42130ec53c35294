//! The imports a module calls on every request, read straight from its memory: the
//! generated bindings lift each `string` and `list` argument into an owned `String` or
//! `Vec` (an allocation and a copy apiece) before the host function runs, then the host
//! copies them again into the answer. These definitions take the arguments as views of the
//! instance's memory (`WasmStr`, `WasmList`) and copy each byte once, where it goes: header
//! fields into the head's lines, body bytes into the part that is sent. A file that the
//! mount keeps open is found by the borrowed tree and path, without allocating.
//!
//! They replace the generated `http.header`, `http.respond`, `http.answer`, `http.write`,
//! `files.size` and `files.send` in the linker (the trait methods of [`crate::host`] remain
//! the bindings' definitions and do the same with owned arguments). What a module sees does
//! not change: a name or path that is not UTF-8 traps, as lifting a `string` does.

use std::sync::Arc;

use bytes::Bytes;
use wasmtime::component::{Linker, WasmList, WasmStr};
use wasmtime::{Result, StoreContextMut};

use crate::bindings::ramjet::module::files::FileError;
use crate::exchange::{self, file_range};
use crate::grants::{Grants, KeptFile};
use crate::host::{drained, file_error, State};

/// The world's interfaces, as the linker names them (with the package's version: a test
/// holds them to `wit/module.wit`).
const HTTP: &str = "ramjet:module/http@0.2.0";
const FILES: &str = "ramjet:module/files@0.2.0";

/// A module's header fields, as its memory holds them.
type Fields = WasmList<(WasmStr, WasmList<u8>)>;

/// Define the borrowing imports over the generated ones (`linker` must allow shadowing).
pub fn add_to_linker(linker: &mut Linker<State>) -> Result<()> {
    let mut http = linker.instance(HTTP)?;
    http.func_wrap(
        "header",
        |store: StoreContextMut<'_, State>, (name,): (WasmStr,)| {
            let name = name.to_str(&store)?;
            let x = store.data().shared.lock();
            Ok((x.headers.get(&name).map(<[u8]>::to_vec),))
        },
    )?;
    http.func_wrap(
        "respond",
        |mut store: StoreContextMut<'_, State>, (status, fields): (u16, Fields)| {
            let head = head(&mut store, status, &fields)?;
            store.data().shared.lock().respond(head);
            Ok(())
        },
    )?;
    http.func_wrap(
        "answer",
        |mut store: StoreContextMut<'_, State>,
         (status, fields, body): (u16, Fields, WasmList<u8>)| {
            let head = head(&mut store, status, &fields)?;
            let body = Bytes::copy_from_slice(body.as_le_slice(&store));
            let mut x = store.data().shared.lock();
            x.respond(head);
            // Not streaming (nothing flushed) unless the body is past the buffer: then
            // the driver streams it, and the module returning ends the stream.
            x.write(body);
            Ok(())
        },
    )?;
    http.func_wrap_async(
        "write",
        |store: StoreContextMut<'_, State>, (bytes,): (WasmList<u8>,)| {
            let shared = store.data().shared.clone();
            shared
                .lock()
                .write(Bytes::copy_from_slice(bytes.as_le_slice(&store)));
            Box::new(async move {
                drained(shared).await;
                Ok(())
            })
        },
    )?;
    let mut files = linker.instance(FILES)?;
    files.func_wrap_async(
        "size",
        |store: StoreContextMut<'_, State>, (tree, path): (WasmStr, WasmStr)| {
            let found = kept(&store, &tree, &path);
            Box::new(async move { Ok((found?.open().await.map(|k| k.stat.size),)) })
        },
    )?;
    files.func_wrap_async(
        "send",
        |store: StoreContextMut<'_, State>,
         (tree, path, offset, len): (WasmStr, WasmStr, u64, Option<u64>)| {
            let found = kept(&store, &tree, &path);
            let shared = store.data().shared.clone();
            Box::new(async move {
                let k = match found?.open().await {
                    Ok(k) => k,
                    Err(e) => return Ok((Err(e),)),
                };
                let Some(len) = file_range(offset, len, k.stat.size) else {
                    return Ok((Err(FileError::InvalidRange),));
                };
                shared.lock().send_file(k.file.clone(), offset, len);
                drained(shared).await;
                Ok((Ok(len),))
            })
        },
    )?;
    Ok(())
}

/// The head a module gives, built from its memory (see [`exchange::head`]).
fn head(
    store: &mut StoreContextMut<'_, State>,
    status: u16,
    fields: &Fields,
) -> Result<ramjet_modules::Head> {
    let mut head = exchange::head(status, []);
    for i in 0..fields.len() {
        let Some(field) = fields.get(&mut *store, i) else {
            break;
        };
        let (name, value) = field?;
        let name = name.to_str(&*store)?;
        let value = value.as_le_slice(&*store);
        if exchange::field_allowed(&name, value) {
            head.add_header(&name, value);
        }
    }
    Ok(head)
}

/// A file a module names: kept open already, or to be opened by these names among the
/// mount's grants.
enum Found {
    Kept(Arc<KeptFile>),
    Open(Arc<Grants>, String, String),
}

impl Found {
    /// The file, opened (and kept for the mount) if it was not kept already.
    async fn open(self) -> std::result::Result<Arc<KeptFile>, FileError> {
        match self {
            Found::Kept(k) => Ok(k),
            Found::Open(grants, tree, path) => {
                grants.open_kept(tree, path).await.map_err(file_error)
            }
        }
    }
}

/// Look the file up among the mount's kept ones by the module's own bytes; the names are
/// copied only when it has to be opened.
fn kept(store: &StoreContextMut<'_, State>, tree: &WasmStr, path: &WasmStr) -> Result<Found> {
    let (tree, path) = (tree.to_str(store)?, path.to_str(store)?);
    let grants = &store.data().grants;
    Ok(match grants.kept(&tree, &path) {
        Some(k) => Found::Kept(k),
        None => Found::Open(grants.clone(), tree.into_owned(), path.into_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interface_names_are_the_worlds() {
        let wit = include_str!("../../../wit/module.wit");
        let package = wit
            .lines()
            .find_map(|l| l.strip_prefix("package "))
            .and_then(|l| l.strip_suffix(';'))
            .expect("a package line");
        let (name, version) = package.split_once('@').expect("a versioned package");
        for (interface, constant) in [("http", HTTP), ("files", FILES)] {
            assert_eq!(constant, format!("{name}/{interface}@{version}"));
            assert!(wit.contains(&format!("interface {interface} {{")));
        }
    }
}
