//! A `cgi` location's programs, environment and account.

use crate::error::ConfigError;
use crate::raw::RawLocation;
use crate::resolve::Resolver;
use std::path::{Path, PathBuf};

/// Where a `cgi` location's programs are, and what their environment gets.
#[derive(Debug, Clone)]
pub struct CgiOptions {
    /// Absolute, an existing directory.
    pub root: std::path::PathBuf,
    /// Extra variables, in order.
    pub env: Vec<(String, String)>,
    /// `DOCUMENT_ROOT` (the location's `root`, else `root`).
    pub document_root: std::path::PathBuf,
    /// Programs run as this user (`cgi_user`): name, uid and primary gid.
    pub user: Option<CgiUser>,
    /// The client's `Authorization` is passed on (`cgi_pass_auth`).
    pub pass_auth: bool,
    /// Fields with `_` in their names become variables too (`underscores_in_headers`).
    pub underscores: bool,
}

/// The account CGI programs run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgiUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// Look `name` (or a numeric uid) up in `passwd` (the text of `/etc/passwd`).
pub fn find_user(passwd: &str, name: &str) -> Option<CgiUser> {
    passwd.lines().find_map(|line| {
        let mut f = line.split(':');
        let (user, _, uid, gid) = (f.next()?, f.next()?, f.next()?, f.next()?);
        let (uid, gid) = (uid.parse().ok()?, gid.parse().ok()?);
        (user == name || name.parse::<u32>() == Ok(uid)).then(|| CgiUser {
            name: user.to_string(),
            uid,
            gid,
        })
    })
}

impl Resolver<'_> {
    /// A CGI location's program directory (absolute, existing), extra environment, the
    /// account its programs run as, and which request fields they see.
    pub(crate) fn cgi(
        &self,
        d: &RawLocation,
        l: &RawLocation,
        key: &str,
    ) -> Result<std::sync::Arc<crate::CgiOptions>, ConfigError> {
        let Some(root) = l.cgi_root.as_ref() else {
            return Err(self.err(
                l.path.as_ref().map(|p| p.span()),
                &format!("{key}.cgi_root"),
                "missing: a location with the cgi handler names its programs' directory".into(),
            ));
        };
        let path = std::path::PathBuf::from(root.get_ref());
        if !path.is_absolute() || !path.is_dir() {
            return Err(self.err(
                Some(root.span()),
                &format!("{key}.cgi_root"),
                format!(
                    "`{}` is not an absolute path to a directory",
                    root.get_ref()
                ),
            ));
        }
        let env = l
            .cgi_env
            .as_ref()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        let document_root = match l.root.as_ref().or(d.root.as_ref()) {
            Some(r) if Path::new(r.get_ref()).is_relative() => self.base.join(r.get_ref()),
            Some(r) => PathBuf::from(r.get_ref()),
            None => path.clone(),
        };
        let user = match l.cgi_user.as_ref().or(d.cgi_user.as_ref()) {
            None => None,
            Some(name) => {
                let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
                match find_user(&passwd, name.get_ref()) {
                    Some(u) if u.uid != process_uid() && process_uid() != 0 => {
                        return Err(self.err(
                            Some(name.span()),
                            &format!("{key}.cgi_user"),
                            format!(
                                "running programs as `{}` needs ramjet to start as root",
                                name.get_ref()
                            ),
                        ))
                    }
                    Some(u) => Some(u),
                    None => {
                        return Err(self.err(
                            Some(name.span()),
                            &format!("{key}.cgi_user"),
                            format!("no user `{}` in /etc/passwd", name.get_ref()),
                        ))
                    }
                }
            }
        };
        Ok(std::sync::Arc::new(crate::CgiOptions {
            root: path,
            env,
            document_root,
            user,
            pass_auth: l.cgi_pass_auth.or(d.cgi_pass_auth).unwrap_or(false),
            underscores: l
                .underscores_in_headers
                .or(d.underscores_in_headers)
                .unwrap_or(false),
        }))
    }
}

/// The uid this process runs as (the owner of its `/proc` entry).
fn process_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or(0, |m| m.uid())
}
