use super::*;
use crate::statics::SymlinkPolicy;
use crate::timeouts::DEFAULT_HEADER_TIMEOUT;

fn load(src: &str) -> Result<Resolved, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    std::fs::create_dir(dir.path().join("pub")).unwrap();
    load_str(src, "test.toml", dir.path())
}

#[test]
fn minimal_and_defaults() {
    let r = load("[[location]]\nroot = \"www\"\n").unwrap();
    assert_eq!(r.listen.len(), 2);
    assert_eq!(r.vhosts.len(), 1);
    let loc = r.route(Some(b"anything"), b"/x").unwrap();
    assert_eq!(loc.prefix, "/");
    assert!(!loc.statics.as_ref().unwrap().autoindex);
    assert_eq!(
        loc.statics.as_ref().unwrap().index,
        vec!["index.html".to_string()]
    );
    assert_eq!(r.timeouts.header, DEFAULT_HEADER_TIMEOUT);
}

#[test]
fn vhosts_locations_and_inheritance() {
    let r = load(
        r#"
listen = ["127.0.0.1:0"]
workers = 3
[defaults]
autoindex = true
symlinks = "never"
[[location]]
root = "www"
[[vhost]]
names = ["Mirror.example", "*.mirror.example"]
root = "www"
[[vhost.location]]
path = "/pub/"
root = "pub"
autoindex = false
precompressed = ["zstd", "gzip"]
types = { log = "text/plain" }
"#,
    )
    .unwrap();
    assert_eq!(r.workers, 3);
    let pub_loc = r
        .route(Some(b"ftp.mirror.example:8080"), b"/pub/a")
        .unwrap();
    assert_eq!(pub_loc.prefix, "/pub/");
    assert!(!pub_loc.statics.as_ref().unwrap().autoindex);
    assert_eq!(
        pub_loc.statics.as_ref().unwrap().symlinks,
        SymlinkPolicy::Never
    );
    assert_eq!(
        pub_loc.statics.as_ref().unwrap().types.get("log").unwrap(),
        "text/plain"
    );
    let root_loc = r.route(Some(b"MIRROR.example"), b"/other").unwrap();
    assert_eq!(root_loc.prefix, "/");
    assert!(root_loc.statics.as_ref().unwrap().autoindex);
    assert_ne!(root_loc.id, pub_loc.id);
    let default = r.route(Some(b"unknown"), b"/pub/a").unwrap();
    assert_eq!(default.prefix, "/");
}

/// With one virtual host, every Host (none, unknown, any case, with a port) reaches it:
/// the name is not looked at.
#[test]
fn one_vhost_answers_every_host() {
    let r = load("[[vhost]]\nnames = [\"only.example\"]\nroot = \"www\"\n").unwrap();
    assert_eq!(r.vhosts.len(), 1);
    for host in [
        None,
        Some(&b"only.example"[..]),
        Some(b"ONLY.example:80"),
        Some(b"other"),
    ] {
        assert_eq!(r.route(host, b"/x").unwrap().prefix, "/", "{host:?}");
    }
    let r = load("[[location]]\nroot = \"www\"\n").unwrap();
    assert!(r.route(None, b"/x").is_some());
}

#[test]
fn errors_name_file_line_and_key() {
    let e = load("[[location]]\nroot = \"www\"\nautoindx = true\n").unwrap_err();
    assert_eq!(e.file, "test.toml");
    assert_eq!(e.line, Some(3));
    assert!(e.message.contains("autoindx"), "{e}");

    let e = load("listen = [\"nonsense\"]\n[[location]]\nroot = \"www\"\n").unwrap_err();
    assert_eq!((e.line, e.key.as_deref()), (Some(1), Some("listen[0]")));

    let e = load("[[location]]\nroot = \"www\"\n[timeouts]\nheader = \"ten\"\n").unwrap_err();
    assert_eq!(e.line, Some(4));
    assert_eq!(e.key.as_deref(), Some("timeouts.header"));

    let e = load("[[location]]\npath = \"/\"\n\nroot = \"missing\"\n").unwrap_err();
    assert_eq!(
        (e.line, e.key.as_deref()),
        (Some(4), Some("location[0].root"))
    );
    assert!(e.message.contains("missing"), "{e}");

    let e = load("[[location]]\npath = \"/a\"\n").unwrap_err();
    assert_eq!(e.key.as_deref(), Some("location[0].root"));

    let e = load("[[location]]\nroot = \"www\"\nsymlinks = \"sometimes\"\n").unwrap_err();
    assert_eq!(
        (e.line, e.key.as_deref()),
        (Some(3), Some("location[0].symlinks"))
    );

    let e = load("workers = 2\nlisten = [\n").unwrap_err();
    assert_eq!(e.line, Some(2));
    let shown = e.to_string();
    assert!(shown.starts_with("test.toml:2"), "{shown}");
}

#[test]
fn upstreams_and_handler_chains() {
    let r = load(
        r#"
[upstream.app]
servers = ["127.0.0.1:8000", { address = "unix:/run/app.sock", weight = 3 }]
balance = "least-connections"
health_check = "/healthz"
[[location]]
root = "www"
handlers = ["static", "proxy"]
proxy = "app"
[[location]]
path = "/api/"
proxy = "app"
proxy_path = "/v2/"
"#,
    )
    .unwrap();
    let u = &r.upstreams[0];
    assert_eq!(u.servers.len(), 2);
    assert_eq!(u.servers[1].weight, 3);
    assert_eq!(
        u.servers[1].addr,
        crate::UpstreamAddr::Unix("/run/app.sock".into())
    );
    assert_eq!(u.balance, crate::Balance::LeastConnections);
    assert_eq!(u.tries, 2);
    let root = r.route(None, b"/x").unwrap();
    assert_eq!(root.handlers, vec![Handler::Static, Handler::Proxy]);
    assert!(root.has_after(Handler::Static) && !root.has_after(Handler::Proxy));
    assert!(root.statics.is_some());
    let api = r.route(None, b"/api/x").unwrap();
    assert_eq!(api.handlers, vec![Handler::Proxy]);
    assert!(api.statics.is_none(), "a proxy-only location needs no root");
    assert_eq!(api.proxy.as_ref().unwrap().path.as_deref(), Some("/v2/"));
}

#[test]
fn upstream_errors_name_line_and_key() {
    let e = load("[[location]]\nproxy = \"nope\"\n").unwrap_err();
    assert_eq!(
        (e.line, e.key.as_deref()),
        (Some(2), Some("location[0].proxy"))
    );
    assert!(e.message.contains("no [upstream.nope]"), "{e}");
    let e =
        load("[upstream.a]\nservers = [\"localhost\"]\n[[location]]\nproxy = \"a\"\n").unwrap_err();
    assert_eq!(
        (e.line, e.key.as_deref()),
        (Some(2), Some("upstream.a.servers[0]"))
    );
    let e =
        load("[[location]]\nroot = \"www\"\nhandlers = [\"static\", \"static\"]\n").unwrap_err();
    assert_eq!(e.key.as_deref(), Some("location[0].handlers"));
    let e = load("[[location]]\nroot = \"www\"\nhandlers = [\"magic\"]\n").unwrap_err();
    assert_eq!(e.line, Some(3), "{e}");
    let e = load("[[location]]\nhandlers = [\"proxy\"]\n").unwrap_err();
    assert_eq!(e.key.as_deref(), Some("location[0].proxy"));
}

#[test]
fn unknown_keys_suggest_the_nearest() {
    let e = load("[[location]]\nroott = \"www\"\n").unwrap_err();
    assert_eq!(
        (e.line, e.key.as_deref()),
        (Some(2), Some("location[0].roott"))
    );
    assert!(
        e.message
            .starts_with("unknown key `roott`; did you mean `root`?"),
        "{e}"
    );
    let e = load("[timeouts]\nkeepalive_timeout = 5\n[[location]]\nroot = \"www\"\n").unwrap_err();
    assert!(e.message.contains("did you mean `keepalive`?"), "{e}");
    let e = load("[[location]]\nroot = \"www\"\nzzzzzz = 1\n").unwrap_err();
    assert!(
        e.message.starts_with("unknown key `zzzzzz` (known here:"),
        "{e}"
    );
    assert_eq!(edit_distance("kitten", "sitting"), 3);
}

#[test]
fn the_directory_to_serve_is_checked_in_a_new_users_terms() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let e = for_directory(&missing, &[], true).unwrap_err();
    assert_eq!(e.file, "command line");
    assert!(e.to_string().contains("does not exist"), "{e}");
    let file = dir.path().join("f.txt");
    std::fs::write(&file, "x").unwrap();
    let e = for_directory(&file, &[], true).unwrap_err();
    assert!(e.to_string().contains("is a file, not a directory"), "{e}");
    assert!(for_directory(dir.path(), &[], true).is_ok());
}

#[test]
fn every_error_of_a_file_is_reported_at_once() {
    let e = load(
        r#"listen = ["127.0.0.1:80", "nonsense"]
workers = 0
[upstream.app]
servers = ["no-port"]
[[location]]
root = "www"
proxy = "app"
handlers = ["static", "proxy"]
[[location]]
path = "relative"
root = "www"
[[location]]
path = "/x/"
root = "missing-dir"
"#,
    )
    .unwrap_err();
    let all: Vec<&ConfigError> = std::iter::once(&e).chain(e.also.iter()).collect();
    let keys: Vec<&str> = all.iter().filter_map(|e| e.key.as_deref()).collect();
    assert_eq!(
        keys,
        [
            "listen[1]",
            "workers",
            "upstream.app.servers[0]",
            "location[1].path",
            "location[2].root"
        ],
        "{e}"
    );
    // One line each, in file order where the place is known.
    let text = e.to_string();
    assert_eq!(text.lines().count(), 5, "{text}");
    assert!(
        text.lines()
            .next()
            .unwrap()
            .starts_with("test.toml:1: key `listen[1]`"),
        "{text}"
    );
    // The location naming the broken upstream adds no error of its own.
    assert!(!text.contains("no [upstream.app]"), "{text}");
}

/// Values of the wrong type, unknown keys in inline tables and the checks of the rest: one
/// run names them all, each with its line and key (they used to come one per run, the
/// first only; `workers` without a line; a listener's unknown keys not at all).
#[test]
fn type_errors_come_all_at_once_with_line_and_key() {
    let src = r#"workers = "four"
listen = [{ address = "127.0.0.1:443", tls = { certificate = "c.pem", key = "k.pem" } }]
[limits]
max_body = "ten megs"
[upstream.backend]
servers = ["no-port", "also bad", { address = "127.0.0.1:1", wieght = 2 }]
[upstream.typed]
servers = "127.0.0.1:80"
[[location]]
root = "www"
autoindex = "yes"
[[location]]
path = "/b/"
proxy = "typed"
[[location]]
path = "/c/"
root = "missing-dir"
"#;
    let e = load(src).unwrap_err();
    let all: Vec<&ConfigError> = std::iter::once(&e).chain(e.also.iter()).collect();
    let found: Vec<(Option<usize>, &str)> = all
        .iter()
        .map(|e| (e.line, e.key.as_deref().unwrap_or("")))
        .collect();
    let text = e.to_string();
    for want in [
        (Some(1), "workers"),
        (Some(2), "listen[0].tls"),
        (Some(4), "limits.max_body"),
        (Some(6), "upstream.backend.servers[2].wieght"),
        (Some(8), "upstream.typed.servers"),
        (Some(11), "location[0].autoindex"),
        (Some(17), "location[2].root"),
    ] {
        assert!(found.contains(&want), "{want:?} missing:\n{text}");
    }
    assert!(text.contains("c.pem: cannot read"), "{text}");
    assert!(!text.contains("missing field"), "{text}");
    assert!(!text.contains("serde"), "{text}");
    // The upstream whose table was wrong is not reported again as "not defined".
    assert!(!text.contains("no [upstream.typed]"), "{text}");
    // Every line of the report has a line number.
    assert!(text.lines().all(|l| l.starts_with("test.toml:")), "{text}");
    let numbered = text.lines().all(|l| {
        l.split(':')
            .nth(1)
            .is_some_and(|n| n.parse::<usize>().is_ok())
    });
    assert!(numbered, "{text}");
}

#[test]
fn every_bad_server_of_an_upstream_is_named() {
    let e = load(
        "[upstream.a]\nservers = [\"no-port\", \"127.0.0.1:1\", \"also-bad\"]\n[[location]]\nproxy = \"a\"\n",
    )
    .unwrap_err();
    let all: Vec<&str> = std::iter::once(&e)
        .chain(e.also.iter())
        .filter_map(|e| e.key.as_deref())
        .collect();
    assert_eq!(
        all,
        ["upstream.a.servers[0]", "upstream.a.servers[2]"],
        "{e}"
    );
}

#[test]
fn a_listener_table_refuses_keys_it_does_not_know() {
    let e = load(
        "listen = [{ address = \"127.0.0.1:0\", bogus_key = 5 }]\n[[location]]\nroot = \"www\"\n",
    )
    .unwrap_err();
    assert_eq!(e.line, Some(1), "{e}");
    assert!(e.message.contains("unknown key `bogus_key`"), "{e}");
    assert!(e.message.contains("proxy_protocol"), "{e}");
    // Still accepted: a plain address and a table of known keys.
    load("listen = [\"127.0.0.1:0\", { address = \"127.0.0.1:0\", proxy_protocol = true }]\n[[location]]\nroot = \"www\"\n").unwrap();
}
