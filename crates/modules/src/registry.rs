//! The modules built into this program, by name, and the starter the configuration calls.

use std::sync::Arc;

use ramjet_config::{ModuleError, ModuleInstance, MountContext};
use serde::de::DeserializeOwned;

use crate::api::Module;

/// Starts a module's shared part from its mount's `module_config` table, with what it may
/// use of the rest of the configuration.
pub type Start = fn(&toml::Table, &MountContext<'_>) -> Result<Arc<dyn Module>, ModuleError>;

/// A module this program can mount.
pub struct Registration {
    /// As `module = "NAME"` names it.
    pub name: &'static str,
    /// Start the shared part ([`Start`]).
    pub start: Start,
}

/// Every built-in module.
pub const BUILT_IN: &[Registration] = &[crate::hello::REGISTRATION, crate::specweb99::REGISTRATION];

/// The configuration's [`ramjet_config::ModuleStarter`]: start module `name` of
/// [`BUILT_IN`] from its table.
pub fn start(
    name: &str,
    config: &toml::Table,
    context: &MountContext<'_>,
) -> Result<ModuleInstance, ModuleError> {
    start_among(&[], name, config, context)
}

/// As [`start`], with `more` modules than the built-in ones (hosts in other crates, such
/// as the WebAssembly one, which the binary links in).
pub fn start_among(
    more: &[Registration],
    name: &str,
    config: &toml::Table,
    context: &MountContext<'_>,
) -> Result<ModuleInstance, ModuleError> {
    let mut all = BUILT_IN.iter().chain(more);
    let Some(r) = all.clone().find(|r| r.name == name) else {
        let names: Vec<&str> = all.by_ref().map(|r| r.name).collect();
        return Err(ModuleError {
            key: None,
            message: format!(
                "no module `{name}` (this program has: {})",
                names.join(", ")
            ),
        });
    };
    let module = (r.start)(config, context)?;
    Ok(Arc::new(module))
}

/// A module's options from its table, through serde (use `#[serde(deny_unknown_fields)]`):
/// an error names the key it is about.
pub fn options<T: DeserializeOwned>(config: &toml::Table) -> Result<T, ModuleError> {
    // Through the text form, so the error carries the span of the key at fault.
    let text = toml::to_string(config).map_err(|e| ModuleError {
        key: None,
        message: e.to_string(),
    })?;
    toml::from_str(&text).map_err(|e| {
        let key = e.span().and_then(|span| {
            let start = text[..span.start].rfind('\n').map_or(0, |i| i + 1);
            let line = &text[start..];
            let key = line.split('=').next()?.trim();
            (!key.is_empty() && !key.starts_with('[')).then(|| key.trim_matches('"').to_string())
        });
        ModuleError {
            key,
            message: e.message().to_string(),
        }
    })
}

/// An error about option `key`.
pub fn option_error(key: &str, message: impl Into<String>) -> ModuleError {
    ModuleError {
        key: Some(key.to_string()),
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Opts {
        greeting: Option<String>,
        count: Option<u32>,
    }

    fn table(s: &str) -> toml::Table {
        toml::from_str(s).unwrap()
    }

    #[test]
    fn option_errors_name_their_key() {
        let e = options::<Opts>(&table("greeting = \"hi\"\ncount = \"many\"")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("count"), "{e:?}");
        let e = options::<Opts>(&table("greetng = \"hi\"")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("greetng"), "{e:?}");
        assert!(e.message.contains("unknown field"), "{e:?}");
        let o = options::<Opts>(&table("count = 3")).unwrap();
        assert_eq!(o.count, Some(3));
        assert!(options::<Opts>(&toml::Table::new()).is_ok());
    }

    #[test]
    fn an_unknown_module_lists_the_known_ones() {
        let e = start("nope", &toml::Table::new(), &MountContext::EMPTY).unwrap_err();
        assert!(e.message.contains("no module `nope`"), "{e:?}");
        assert!(e.message.contains("hello"), "{e:?}");
    }
}
