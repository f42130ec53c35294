//! Module mounts: `module = "NAME"` on a location with its own `[location.module_config]`
//! table. The configuration crate does not know the modules; the binary installs a
//! [`ModuleStarter`] that starts one from its table (checking it), so a bad table is a
//! configuration error with file, line and key like any other, and a reload starts the
//! new configuration's modules before it is taken.

use crate::error::ConfigError;
use crate::raw::RawLocation;
use crate::resolve::Resolver;
use std::any::Any;
use std::sync::{Arc, OnceLock};

/// A started module, opaque here (the `modules` crate knows its type).
pub type ModuleInstance = Arc<dyn Any + Send + Sync>;

/// What a starter reports when a module's table is wrong: the key under
/// `module_config` (None: the table as a whole, or the name) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleError {
    pub key: Option<String>,
    pub message: String,
}

/// What a module may use of the rest of the configuration when it is started.
pub struct MountContext<'a> {
    /// The configuration's `[upstream.NAME]` groups, resolved (a module may send to one by
    /// name, as the WebAssembly host's granted upstreams do).
    pub upstreams: &'a [crate::Upstream],
}

impl MountContext<'_> {
    /// A context with nothing in it (a module started outside a configuration: tests).
    pub const EMPTY: MountContext<'static> = MountContext { upstreams: &[] };

    /// The `[upstream.NAME]` group called `name`.
    pub fn upstream(&self, name: &str) -> Option<&crate::Upstream> {
        self.upstreams.iter().find(|u| u.name == name)
    }
}

/// Starts module `name` from its table.
pub type ModuleStarter = fn(
    name: &str,
    config: &toml::Table,
    context: &MountContext<'_>,
) -> Result<ModuleInstance, ModuleError>;

static STARTER: OnceLock<ModuleStarter> = OnceLock::new();

/// Install the module starter (once per process; later calls are ignored).
pub fn set_module_starter(starter: ModuleStarter) {
    let _ = STARTER.set(starter);
}

pub(crate) fn start(
    name: &str,
    config: &toml::Table,
    context: &MountContext<'_>,
) -> Result<ModuleInstance, ModuleError> {
    match STARTER.get() {
        Some(start) => start(name, config, context),
        None => Err(ModuleError {
            key: None,
            message: "this program has no modules".into(),
        }),
    }
}

/// A module mounted on a location.
pub struct ModuleMount {
    pub name: String,
    /// The location's `module_config` table, as written.
    pub config: toml::Table,
    /// The started module.
    pub instance: ModuleInstance,
}

impl std::fmt::Debug for ModuleMount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ModuleMount({})", self.name)
    }
}

impl Resolver<'_> {
    /// A location's module, started from its `module_config` table (a wrong table is
    /// this file's error, at the table's line).
    pub(crate) fn module(
        &self,
        l: &RawLocation,
        key: &str,
        upstreams: &[crate::Upstream],
    ) -> Result<std::sync::Arc<crate::ModuleMount>, ConfigError> {
        let Some(name) = l.module.as_ref() else {
            return Err(self.err(
                l.path.as_ref().map(|p| p.span()),
                &format!("{key}.module"),
                "missing: a location with the module handler names its module".into(),
            ));
        };
        let config = l
            .module_config
            .as_ref()
            .map(|t| t.get_ref().clone())
            .unwrap_or_default();
        match crate::module::start(name.get_ref(), &config, &MountContext { upstreams }) {
            Ok(instance) => Ok(std::sync::Arc::new(crate::ModuleMount {
                name: name.get_ref().clone(),
                config,
                instance,
            })),
            Err(e) => {
                let (span, k) = match (&e.key, &l.module_config) {
                    (Some(k), Some(t)) => (t.span(), format!("{key}.module_config.{k}")),
                    (Some(k), None) => (name.span(), format!("{key}.module_config.{k}")),
                    (None, _) => (name.span(), format!("{key}.module")),
                };
                Err(self.err(Some(span), &k, e.message))
            }
        }
    }
}
