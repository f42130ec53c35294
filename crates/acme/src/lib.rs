//! Certificates from an ACME CA (RFC 8555, e.g. Let's Encrypt) for the sites with
//! `tls = "acme"`: one thread of its own checks every site at start and every 12 hours,
//! and obtains a certificate for a site whose stored one is missing, unusable or within
//! `renew_before` of expiry. The challenge is answered by ramjet itself: for HTTP-01 the
//! key authorization is written under the state directory's `http-01/`, which every host
//! serves at `/.well-known/acme-challenge/`; for TLS-ALPN-01 (RFC 8737) a certificate
//! carrying its digest is written under `tls-alpn-01/NAME.pem`, which every TLS listener
//! presents to a client asking only for `acme-tls/1`. A new certificate is written (key 0600, by a
//! temporary file and a rename) and the server reloads, as on SIGHUP: connections in
//! progress are not touched. A failure is logged with the site and the CA's answer, and
//! tried again after `retry`, doubled each time up to an hour. The account key is kept in
//! `account.json` (0600) and reused after a restart. The protocol is the `instant-acme`
//! crate's.
#![forbid(unsafe_code)]

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, OrderStatus, RetryPolicy,
};
use ramjet_config::{AcmeOptions, AcmeSite};

/// How often certificates are looked at when all is well.
const CHECK_EVERY: Duration = Duration::from_secs(12 * 3600);
/// The longest wait after failures.
const MOST_RETRY: Duration = Duration::from_secs(3600);

/// Start the ACME thread; `reload` is called after a new certificate was stored.
pub fn spawn(options: AcmeOptions, reload: impl Fn() + Send + 'static) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("ramjet-acme".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!("acme: cannot start: {e}");
                    return;
                }
            };
            rt.block_on(run(options, reload));
        })
        .map(|_| ())
}

async fn run(options: AcmeOptions, reload: impl Fn()) {
    let mut retry = options.retry;
    loop {
        let mut failed = false;
        let mut renewed = false;
        for site in &options.sites {
            if let Some(why) = needs_certificate(site, options.renew_before) {
                tracing::info!(
                    "acme: {}: {why}; asking {}",
                    site.names.join(", "),
                    options.directory
                );
                match obtain(&options, site).await {
                    Ok(()) => {
                        tracing::info!("acme: {}: certificate stored", site.names.join(", "));
                        renewed = true;
                    }
                    Err(e) => {
                        tracing::warn!(
                            "acme: {}: {e:#}; trying again in {}s",
                            site.names.join(", "),
                            retry.as_secs()
                        );
                        failed = true;
                    }
                }
            }
        }
        if renewed {
            reload();
        }
        if failed {
            tokio::time::sleep(retry).await;
            retry = (retry * 2).min(MOST_RETRY);
        } else {
            retry = options.retry;
            tokio::time::sleep(CHECK_EVERY).await;
        }
    }
}

/// Why a site needs a certificate (`None`: its stored one is good for longer than
/// `renew_before`).
pub fn needs_certificate(site: &AcmeSite, renew_before: Duration) -> Option<String> {
    let provider = ramjet_tls::server::provider();
    let cert = match ramjet_tls::load(&site.certificate, &site.key, &provider) {
        Ok(c) => c,
        Err(e) => return Some(format!("no usable certificate ({e})")),
    };
    if let Some(n) = site.names.iter().find(|n| !cert.covers(n)) {
        return Some(format!("the stored certificate does not name {n}"));
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let left = cert.not_after - now;
    (left < renew_before.as_secs() as i64)
        .then(|| format!("the certificate expires in {}h", left / 3600))
}

/// One order: the account, an HTTP-01 answer per name, the CSR, the chain; stored.
async fn obtain(options: &AcmeOptions, site: &AcmeSite) -> anyhow::Result<()> {
    let account = account(options).await?;
    let identifiers: Vec<Identifier> = site
        .names
        .iter()
        .map(|n| Identifier::Dns(n.clone()))
        .collect();
    let mut order = account
        .new_order(&NewOrder::new(&identifiers))
        .await
        .context("new order")?;
    let answers = options.webroot().join(".well-known/acme-challenge");
    let mut written = Vec::new();
    let mut authorizations = order.authorizations();
    while let Some(a) = authorizations.next().await {
        let mut a = a.context("authorization")?;
        if a.status == AuthorizationStatus::Valid {
            continue;
        }
        let kind = if options.tls_alpn {
            ChallengeType::TlsAlpn01
        } else {
            ChallengeType::Http01
        };
        let mut challenge = a
            .challenge(kind.clone())
            .with_context(|| format!("the CA offers no {kind:?} challenge"))?;
        let path = if options.tls_alpn {
            // RFC 8737: a certificate for the name carrying the key authorization's
            // digest, presented to a client that asks for `acme-tls/1` only.
            let name = challenge.identifier().to_string();
            let path = ramjet_tls::server::challenge_file(&options.alpn_answers(), &name)
                .with_context(|| format!("an unusable name {name:?}"))?;
            let digest = challenge.key_authorization().digest();
            let pem = alpn_certificate(&name, digest.as_ref())?;
            store(&path, pem.as_bytes(), 0o600)?;
            path
        } else {
            if challenge.token.is_empty() || challenge.token.contains(['/', '.']) {
                bail!("the CA sent an unusable token {:?}", challenge.token);
            }
            let path = answers.join(&challenge.token);
            std::fs::write(&path, challenge.key_authorization().as_str())
                .with_context(|| format!("writing {}", path.display()))?;
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644));
            path
        };
        written.push(path);
        challenge.set_ready().await.context("challenge ready")?;
    }
    let policy = RetryPolicy::new()
        .initial_delay(Duration::from_millis(250))
        .timeout(Duration::from_secs(90));
    let status = order.poll_ready(&policy).await;
    for p in &written {
        let _ = std::fs::remove_file(p);
    }
    match status.context("waiting for the CA to validate")? {
        OrderStatus::Ready => {}
        other => bail!("the order is {other:?}, not ready (the CA could not validate it)"),
    }
    let key = order.finalize().await.context("finalize")?;
    let chain = order
        .poll_certificate(&policy)
        .await
        .context("downloading the certificate")?;
    store(&site.key, key.as_bytes(), 0o600)?;
    store(&site.certificate, chain.as_bytes(), 0o644)?;
    Ok(())
}

/// A TLS-ALPN-01 challenge certificate for `name` and its key, PEM (RFC 8737 §3).
fn alpn_certificate(name: &str, digest: &[u8]) -> anyhow::Result<String> {
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()])?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok(format!("{}{}", cert.pem(), key.serialize_pem()))
}

/// The account kept in `account.json`, or a new one registered and saved.
async fn account(options: &AcmeOptions) -> anyhow::Result<Account> {
    let file = options.state_dir.join("account.json");
    let builder = || match &options.ca_certificate {
        Some(ca) => Account::builder_with_root(ca).context("the ACME CA certificate"),
        None => Account::builder().context("the system's trusted roots"),
    };
    if let Ok(text) = std::fs::read(&file) {
        let credentials: AccountCredentials =
            serde_json::from_slice(&text).with_context(|| format!("reading {}", file.display()))?;
        return builder()?
            .from_credentials(credentials)
            .await
            .context("the stored account");
    }
    let contact: Vec<&str> = options.contact.iter().map(String::as_str).collect();
    let (account, credentials) = builder()?
        .create(
            &NewAccount {
                contact: &contact,
                terms_of_service_agreed: true,
                only_return_existing: false,
            },
            options.directory.clone(),
            None,
        )
        .await
        .context("registering an account")?;
    store(&file, &serde_json::to_vec(&credentials)?, 0o600)?;
    Ok(account)
}

/// Write `bytes` to `path` with `mode` through a temporary file and a rename, so a reader
/// sees the old file or the new one, never half of one.
fn store(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    let dir = path.parent().context("no directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}
