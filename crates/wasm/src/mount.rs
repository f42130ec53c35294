//! A mount: its options checked, its component compiled (or taken from the cache) and
//! linked against the host's imports, and the module its workers ask.

use std::sync::Arc;

use ramjet_config::{ModuleError, MountContext};
use ramjet_modules::{
    option_error, LaterReply, Module, ModuleRequest, ModuleWorker, Registration, Reply,
};
use wasmtime::component::{Component, HasSelf, Linker};

use crate::bindings::{self, ModulePre};
use crate::borrowing;
use crate::call::{self, Idle, Mounted};
use crate::grants::Grants;
use crate::host::State;
use crate::{engine, options};

/// How `module = "wasm"` is found.
pub const REGISTRATION: Registration = Registration {
    name: "wasm",
    start,
};

/// Start a mount: check its options, compile (or take from the cache) and link its
/// component. A component that does not fit the world is a configuration error.
fn start(config: &toml::Table, context: &MountContext<'_>) -> Result<Arc<dyn Module>, ModuleError> {
    let o = options::parse(config, context)?;
    let engine = engine::engine().map_err(|e| option_error("component", e))?;
    let shown = o.component.display().to_string();
    let component = Component::from_file(engine, &o.component)
        .map_err(|e| option_error("component", format!("{shown}: {e:#}")))?;
    let mut linker: Linker<State> = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)
        .map_err(|e| option_error("component", format!("{e:#}")))?;
    bindings::Module::add_to_linker::<State, HasSelf<State>>(&mut linker, |s| s)
        .map_err(|e| option_error("component", format!("{e:#}")))?;
    // The imports every request calls, over the generated ones: read from the module's
    // memory instead of lifted into owned copies.
    linker.allow_shadowing(true);
    borrowing::add_to_linker(&mut linker)
        .map_err(|e| option_error("component", format!("{e:#}")))?;
    let pre = linker
        .instantiate_pre(&component)
        .and_then(ModulePre::new)
        .map_err(|e| {
            option_error(
                "component",
                format!("{shown}: not a ramjet module (wit/module.wit): {e:#}"),
            )
        })?;
    let file = o
        .component
        .file_name()
        .map_or(shown.clone(), |n| n.to_string_lossy().into_owned());
    let grants =
        Grants::new(format!("wasm module {file}"), o.files, o.vars).with(o.journals, o.upstreams);
    Ok(Arc::new(Wasm(Arc::new(Mounted {
        pre,
        grants: Arc::new(grants),
        memory: o.memory,
        cpu: o.cpu,
        reuse: o.reuse,
        overload: Default::default(),
    }))))
}

/// A started mount.
struct Wasm(Arc<Mounted>);

impl Module for Wasm {
    fn worker(self: Arc<Self>) -> Box<dyn ModuleWorker> {
        Box::new(WasmWorker {
            mounted: self.0.clone(),
            idle: Idle::default(),
        })
    }
}

/// A mount on one worker: the instances it keeps between requests (dropped with it on
/// reload).
struct WasmWorker {
    mounted: Arc<Mounted>,
    idle: Idle,
}

impl ModuleWorker for WasmWorker {
    fn handle<'r>(&'r self, req: &'r ModuleRequest<'r>) -> Result<Reply, LaterReply<'r>> {
        Err(Box::pin(call::call(
            self.mounted.clone(),
            self.idle.clone(),
            req,
        )))
    }
}
