//! Certificates by ACME (RFC 8555) from pebble, Let's Encrypt's test CA, started here with
//! its DNS companion answering 127.0.0.1 for every name: ramjet registers, answers the
//! HTTP-01 challenge itself, stores account and certificate privately, serves the
//! certificate, and after a restart serves it again without asking the CA.

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ramjet_testkit::Server;

/// Where `go install` put pebble, and its module's test files.
fn go_path(var: &str) -> PathBuf {
    let out = Command::new("go")
        .args(["env", var])
        .output()
        .expect("go is installed");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// pebble and pebble-challtestsrv; returns them, the directory URL, the management port
/// and the CA file that signs pebble's own HTTPS.
fn pebble(dir: &Path, http_port: u16, tls_port: u16) -> (Vec<Killed>, String, u16, PathBuf) {
    let bin = go_path("GOPATH").join("bin");
    let module = go_path("GOMODCACHE").join("github.com/letsencrypt/pebble/v2@v2.10.1/test/certs");
    let (api, mgmt, dns) = (free_port(), free_port(), free_port());
    let dns_srv = Command::new(bin.join("pebble-challtestsrv"))
        .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
        .args(["-dnsserver", &format!("127.0.0.1:{dns}")])
        .args(["-management", &format!("127.0.0.1:{}", free_port())])
        .args(["-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", ""])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("pebble-challtestsrv is installed (.ci/deps)");
    let config = dir.join("pebble.json");
    std::fs::write(
        &config,
        format!(
            r#"{{"pebble": {{"listenAddress": "127.0.0.1:{api}", "managementListenAddress": "127.0.0.1:{mgmt}",
              "certificate": "{c}", "privateKey": "{k}", "httpPort": {http_port}, "tlsPort": {tls},
              "ocspResponderURL": "", "externalAccountBindingRequired": false}}}}"#,
            c = module.join("localhost/cert.pem").display(),
            k = module.join("localhost/key.pem").display(),
            tls = tls_port,
        ),
    )
    .unwrap();
    let pebble = Command::new(bin.join("pebble"))
        .arg("-config")
        .arg(&config)
        .args(["-dnsserver", &format!("127.0.0.1:{dns}")])
        .env("PEBBLE_VA_NOSLEEP", "1")
        .env("PEBBLE_WFE_NONCEREJECT", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("pebble is installed (.ci/deps)");
    let procs = vec![Killed(dns_srv), Killed(pebble)];
    let ca = module.join("pebble.minica.pem");
    let url = format!("https://127.0.0.1:{api}/dir");
    crate::poll_until(|| {
        crate::curl(&["--cacert", ca.to_str().unwrap(), &url])
            .0
            .then_some(())
    });
    (procs, url, mgmt, ca)
}

/// The root that signs pebble's certificates, from its management interface, as a file.
fn issuing_root(dir: &Path, mgmt: u16) -> PathBuf {
    let root = dir.join("root.pem");
    let (ok, pem) = crate::curl(&["-k", &format!("https://127.0.0.1:{mgmt}/roots/0")]);
    assert!(ok);
    std::fs::write(&root, pem).unwrap();
    root
}

/// `https://HOST:PORT/f` on 127.0.0.1 with curl, trusting only `root`.
fn fetch_trusting(root: &Path, host: &str, port: u16) -> (bool, Vec<u8>) {
    crate::curl(&[
        "--cacert",
        root.to_str().unwrap(),
        "--resolve",
        &format!("{host}:{port}:127.0.0.1"),
        &format!("https://{host}:{port}/f"),
    ])
}

fn config(http_port: u16, directory: &str, ca: &Path, state: &Path) -> String {
    config_with(0, http_port, directory, ca, state, "http-01")
}

fn config_with(
    tls_port: u16,
    http_port: u16,
    directory: &str,
    ca: &Path,
    state: &Path,
    challenge: &str,
) -> String {
    site_config(tls_port, http_port, directory, ca, state, challenge, "")
}

/// The site, with `defaults` (a `[defaults]` table's keys) for every location.
fn site_config(
    tls_port: u16,
    http_port: u16,
    directory: &str,
    ca: &Path,
    state: &Path,
    challenge: &str,
    defaults: &str,
) -> String {
    format!(
        "listen = [{{ address = \"127.0.0.1:{tls_port}\", tls = \"acme\" }}, \"127.0.0.1:{http_port}\"]\nworkers = 1\n\
         [acme]\ndirectory = \"{directory}\"\nca_certificate = \"{}\"\nstate_dir = \"{}\"\ncontact = [\"ops@a.test\"]\nretry = \"1s\"\nchallenge = \"{challenge}\"\n\
         [defaults]\n{defaults}\n\
         [[vhost]]\nnames = [\"a.test\", \"www.a.test\"]\nroot = \"root\"\ntls = \"acme\"\n",
        ca.display(),
        state.display()
    )
}

#[test]
fn a_certificate_is_obtained_from_pebble_stored_and_reused_after_a_restart() {
    let work = tempfile::tempdir().unwrap();
    let state = work.path().join("acme");
    let http_port = free_port();
    let (procs, directory, mgmt, ca) = pebble(work.path(), http_port, free_port());
    let dir = Server::dir();
    std::fs::write(dir.path().join("root/f"), b"secure").unwrap();
    let s = Server::start(crate::BIN, dir, &config(http_port, &directory, &ca, &state));
    assert!(
        s.wait_for_log(
            "acme: a.test, www.a.test: certificate stored",
            Duration::from_secs(90)
        ),
        "{:?}",
        s.stderr()
    );
    let root = issuing_root(work.path(), mgmt);
    let port = s.tls_addr.unwrap().port();
    let fetch = |host: &str| fetch_trusting(&root, host, port);
    // Served once the reload that follows has taken it.
    crate::poll_until(|| fetch("a.test").0.then_some(()));
    assert_eq!(fetch("www.a.test"), (true, b"secure".to_vec()));
    // Kept privately.
    let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(state.join("account.json")), 0o600);
    assert_eq!(mode(state.join("sites/a.test/key.pem")), 0o600);
    assert_eq!(mode(state.clone()), 0o700);
    drop(s);
    // The CA gone, a new start serves the stored certificate at once.
    drop(procs);
    let dir = Server::dir();
    std::fs::write(dir.path().join("root/f"), b"secure").unwrap();
    let s = Server::start(crate::BIN, dir, &config(http_port, &directory, &ca, &state));
    let port2 = s.tls_addr.unwrap().port();
    let (ok, body) = fetch_trusting(&root, "a.test", port2);
    assert!(ok && body == b"secure");
    assert!(
        !s.stderr().iter().any(|l| l.contains("asking")),
        "{:?}",
        s.stderr()
    );
}

#[test]
fn an_unreachable_ca_is_retried_with_a_clear_log_line() {
    let work = tempfile::tempdir().unwrap();
    let state = work.path().join("acme");
    let dir = Server::dir();
    std::fs::write(dir.path().join("root/f"), b"up").unwrap();
    let dead = free_port();
    let ca = work.path().join("ca.pem");
    std::fs::write(
        &ca,
        rcgen::generate_simple_self_signed(vec!["x".into()])
            .unwrap()
            .cert
            .pem(),
    )
    .unwrap();
    let s = Server::start(
        crate::BIN,
        dir,
        &config(
            free_port(),
            &format!("https://127.0.0.1:{dead}/dir"),
            &ca,
            &state,
        ),
    );
    // The failure names the site and says when it tries again; the server serves on.
    assert!(s.wait_for_log("acme: a.test, www.a.test:", Duration::from_secs(30)));
    assert!(s.wait_for_log("trying again in 1s", Duration::from_secs(30)));
    assert!(s.wait_for_log("trying again in 2s", Duration::from_secs(30)));
    assert_eq!(s.get("/f").text(), "up");
}

#[test]
fn tls_alpn_01_is_answered_on_the_tls_listener() {
    let work = tempfile::tempdir().unwrap();
    let state = work.path().join("acme");
    // No cleartext port for the CA: it can only prove the names over TLS.
    let (tls_port, unused_http) = (free_port(), free_port());
    let (_procs, directory, mgmt, ca) = pebble(work.path(), unused_http, tls_port);
    let dir = Server::dir();
    std::fs::write(dir.path().join("root/f"), b"over alpn").unwrap();
    let s = Server::start(
        crate::BIN,
        dir,
        &config_with(
            tls_port,
            free_port(),
            &directory,
            &ca,
            &state,
            "tls-alpn-01",
        ),
    );
    assert!(
        s.wait_for_log(
            "acme: a.test, www.a.test: certificate stored",
            Duration::from_secs(90)
        ),
        "{:?}",
        s.stderr()
    );
    assert!(s.wait_for_log(
        "answered an ACME tls-alpn-01 challenge",
        Duration::from_secs(5)
    ));
    let root = issuing_root(work.path(), mgmt);
    let fetch = || fetch_trusting(&root, "a.test", tls_port);
    crate::poll_until(|| fetch().0.then_some(()));
    assert_eq!(fetch().1, b"over alpn");
    // A client asking for acme-tls/1 and a name with no answer waiting gets no certificate.
    let out = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{tls_port}")])
        .args(["-servername", "a.test", "-alpn", "acme-tls/1"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("BEGIN CERTIFICATE"), "{text}");
}

#[test]
fn the_challenge_is_reachable_where_defaults_demand_a_password() {
    let work = tempfile::tempdir().unwrap();
    let state = work.path().join("acme");
    let http_port = free_port();
    let (_procs, directory, _mgmt, ca) = pebble(work.path(), http_port, free_port());
    let dir = Server::dir();
    std::fs::write(dir.path().join("root/f"), b"private").unwrap();
    let users = dir.path().join("users");
    let ok = Command::new("htpasswd")
        .args(["-bc"])
        .arg(&users)
        .args(["ann", "secret"])
        .output()
        .expect("htpasswd is installed (apache2-utils)")
        .status
        .success();
    assert!(ok);
    let s = Server::start(
        crate::BIN,
        dir,
        &site_config(
            0,
            http_port,
            &directory,
            &ca,
            &state,
            "http-01",
            &format!(
                "auth_basic = \"staff\"\nauth_basic_user_file = \"{}\"",
                users.display()
            ),
        ),
    );
    assert!(
        s.wait_for_log(
            "acme: a.test, www.a.test: certificate stored",
            Duration::from_secs(90)
        ),
        "{:?}",
        s.stderr()
    );
    // Everything else still asks for the password.
    let r = s.get("/f");
    assert_eq!(r.status, 401);
}
