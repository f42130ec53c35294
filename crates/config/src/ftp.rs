//! `[ftp]`: read-only anonymous FTP on the listeners marked `protocol = "ftp"`, serving one
//! static location of the default site (its root, symlink policy, dot-file rule, access
//! rules and send rates).

use std::net::Ipv4Addr;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::handler::Handler;
use crate::resolve::Resolver;
use crate::resolved::VHost;
use crate::units::Seconds;

/// vsftpd's `idle_session_timeout`.
const DEFAULT_IDLE: Duration = Duration::from_secs(300);
/// vsftpd's `accept_timeout` and `data_connection_timeout` are 60 and 300 s; one minute
/// for both: a data connection that neither arrives nor moves for a minute is given up.
const DEFAULT_DATA: Duration = Duration::from_secs(60);

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFtp {
    /// The path of the default site's static location served (default "/").
    pub location: Option<Spanned<String>>,
    /// Passive data ports, "LOW-HIGH" (default: any port the kernel picks).
    pub passive_ports: Option<Spanned<String>>,
    /// The IPv4 address announced in PASV replies (behind NAT); default the control
    /// connection's own address.
    pub passive_address: Option<Spanned<String>>,
    /// A control connection with no command for this long is closed (421).
    pub idle_timeout: Option<Seconds>,
    /// A data connection not opened, or not moving, for this long is given up (425/426).
    pub data_timeout: Option<Seconds>,
    /// Serve PORT and EPRT (active mode), to the client's own address only.
    pub active: Option<bool>,
    /// FTPS (RFC 4217, explicit: AUTH TLS) with this certificate.
    pub tls: Option<Spanned<crate::tls::RawTls>>,
    /// Refuse USER until the control connection is under TLS.
    pub tls_required: Option<Spanned<bool>>,
}

/// `[ftp]`, resolved.
#[derive(Debug, Clone)]
pub struct FtpOptions {
    /// The served location: `vhosts[vhost].locations[location]` (a static one).
    pub vhost: usize,
    pub location: usize,
    /// Passive ports, inclusive; `None`: the kernel's choice.
    pub passive_ports: Option<(u16, u16)>,
    pub passive_address: Option<Ipv4Addr>,
    pub idle: Duration,
    pub data: Duration,
    /// PORT and EPRT are served (to the control connection's client address only).
    pub active: bool,
    /// AUTH TLS is served with this certificate.
    pub tls: Option<ramjet_tls::Acceptor>,
    /// The files of `tls` (for `check-config`).
    pub tls_files: Option<crate::TlsFiles>,
    /// USER is refused until AUTH TLS.
    pub tls_required: bool,
}

impl Resolver<'_> {
    /// `[ftp]` when some listener serves FTP (defaults where it is absent); `None`, and an
    /// error for a table no listener uses, otherwise.
    pub(crate) fn ftp(
        &self,
        raw: Option<&Spanned<RawFtp>>,
        any_listener: bool,
        vhosts: &[VHost],
        default_vhost: usize,
    ) -> Option<FtpOptions> {
        if !any_listener {
            if let Some(t) = raw {
                self.keep::<()>(Err(self.err(
                    Some(t.span()),
                    "ftp",
                    "no listener serves FTP: add `{ address = \"[::]:21\", protocol = \"ftp\" }` \
                     to `listen`"
                        .into(),
                )));
            }
            return None;
        }
        let empty = RawFtp::default();
        let t = raw.map_or(&empty, Spanned::get_ref);
        let wanted = t.location.as_ref().map_or("/", |l| l.get_ref().as_str());
        let at = t.location.as_ref().map(Spanned::span);
        let site = vhosts.get(default_vhost);
        let found = site.and_then(|v| {
            v.locations
                .iter()
                .position(|l| l.prefix.trim_end_matches('/') == wanted.trim_end_matches('/'))
        });
        let location = match found {
            Some(i) => {
                let l = &site.expect("found in it").locations[i];
                if !l.handlers.contains(&Handler::Static) || l.statics.is_none() {
                    self.keep::<()>(Err(self.err(
                        at,
                        "ftp.location",
                        format!("location `{wanted}` does not serve files (no `static` handler)"),
                    )));
                    None
                } else if l.auth.is_some() {
                    self.keep::<()>(Err(self.err(
                        at,
                        "ftp.location",
                        format!(
                            "location `{wanted}` asks for a password: FTP here serves \
                             anonymous users only"
                        ),
                    )));
                    None
                } else {
                    Some(i)
                }
            }
            None => {
                self.keep::<()>(Err(self.err(
                    at,
                    "ftp.location",
                    format!("the default site has no location `{wanted}` to serve over FTP"),
                )));
                None
            }
        };
        let passive_ports = self.parsed(
            t.passive_ports.as_ref(),
            "ftp.passive_ports",
            parse_ports,
            "a port range (e.g. \"50000-50999\", from 1024 up)",
        );
        let passive_address = self.parsed(
            t.passive_address.as_ref(),
            "ftp.passive_address",
            |a| a.parse::<Ipv4Addr>().ok(),
            "an IPv4 address (PASV announces only IPv4; EPSV needs none)",
        );
        let tls = t.tls.as_ref().and_then(|f| {
            let files = self.tls_files(f.get_ref());
            let provider = ramjet_tls::server::provider();
            let cert = self.keep(
                ramjet_tls::load(&files.certificate, &files.key, &provider)
                    .map_err(|m| self.err(Some(f.span()), "ftp.tls", m)),
            )?;
            let acceptor = self.keep(
                // No ALPN: FTP clients offer none, and a list would refuse those that do.
                ramjet_tls::Acceptor::new(ramjet_tls::Sites::new(Some(cert.key)), &[])
                    .map_err(|e| self.err(Some(f.span()), "ftp.tls", e.to_string())),
            )?;
            Some((acceptor, files))
        });
        let tls_required = t.tls_required.as_ref().is_some_and(|r| *r.get_ref());
        if tls_required && t.tls.is_none() {
            self.keep::<()>(Err(self.err(
                t.tls_required.as_ref().map(Spanned::span),
                "ftp.tls_required",
                "needs `tls = { certificate, key }` in [ftp]".into(),
            )));
        }
        Some(FtpOptions {
            vhost: default_vhost,
            location: location?,
            passive_ports,
            passive_address,
            idle: t.idle_timeout.map_or(DEFAULT_IDLE, |s| s.0),
            data: t.data_timeout.map_or(DEFAULT_DATA, |s| s.0),
            active: t.active.unwrap_or(false),
            tls_files: tls.as_ref().map(|(_, f)| f.clone()),
            tls: tls.map(|(a, _)| a),
            tls_required,
        })
    }
}

impl Resolver<'_> {
    /// `value` read by `parse`; an error naming `key` and saying it is not `what` (noted,
    /// `None`) when it does not read.
    fn parsed<T>(
        &self,
        value: Option<&Spanned<String>>,
        key: &str,
        parse: impl Fn(&str) -> Option<T>,
        what: &str,
    ) -> Option<T> {
        let v = value?;
        self.keep(parse(v.get_ref()).ok_or_else(|| {
            self.err(
                Some(v.span()),
                key,
                format!("`{}` is not {what}", v.get_ref()),
            )
        }))
    }
}

/// "LOW-HIGH" with 1024 <= LOW <= HIGH (one port: "N").
fn parse_ports(s: &str) -> Option<(u16, u16)> {
    let (lo, hi) = s.split_once('-').unwrap_or((s, s));
    let lo: u16 = lo.trim().parse().ok()?;
    let hi: u16 = hi.trim().parse().ok()?;
    (lo >= 1024 && lo <= hi).then_some((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::parse_ports;

    #[test]
    fn port_ranges() {
        assert_eq!(parse_ports("50000-50999"), Some((50000, 50999)));
        assert_eq!(parse_ports("60000"), Some((60000, 60000)));
        assert_eq!(parse_ports(" 1024 - 1024 "), Some((1024, 1024)));
        assert_eq!(parse_ports("1023-2000"), None);
        assert_eq!(parse_ports("3000-2000"), None);
        assert_eq!(parse_ports("a-b"), None);
        assert_eq!(parse_ports("70000"), None);
        assert_eq!(parse_ports(""), None);
    }
}
