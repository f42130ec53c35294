//! A location's Basic authentication (`auth_basic`, `auth_basic_user_file`, as nginx names
//! them): the htpasswd file is read and checked at load, and the challenge header is
//! rendered once.

use std::path::Path;
use std::sync::Arc;

use ramjet_auth::Htpasswd;

/// What protects a location.
#[derive(Debug)]
pub struct BasicAuth {
    /// `WWW-Authenticate: Basic realm="...", charset="UTF-8"\r\n`, sent with every 401.
    pub challenge: Vec<u8>,
    pub users: Arc<Htpasswd>,
    /// The file, for `check-config`'s printout.
    pub file: std::path::PathBuf,
    pub realm: String,
}

/// Build from a realm and a loaded file; `Err` is the message about the realm.
pub(crate) fn basic_auth(
    realm: &str,
    file: &Path,
    users: Arc<Htpasswd>,
) -> Result<BasicAuth, String> {
    if realm
        .bytes()
        .any(|b| b < b' ' || b == 0x7f || b == b'"' || b == b'\\')
    {
        return Err("the realm may not hold quotes, backslashes or control characters".into());
    }
    Ok(BasicAuth {
        challenge: format!("WWW-Authenticate: Basic realm=\"{realm}\", charset=\"UTF-8\"\r\n")
            .into_bytes(),
        users,
        file: file.to_path_buf(),
        realm: realm.to_string(),
    })
}
