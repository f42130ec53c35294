use super::*;

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
    assert!(!loc.statics.autoindex);
    assert_eq!(loc.statics.index, vec!["index.html".to_string()]);
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
    assert!(!pub_loc.statics.autoindex);
    assert_eq!(pub_loc.statics.symlinks, SymlinkPolicy::Never);
    assert_eq!(pub_loc.statics.types.get("log").unwrap(), "text/plain");
    let root_loc = r.route(Some(b"MIRROR.example"), b"/other").unwrap();
    assert_eq!(root_loc.prefix, "/");
    assert!(root_loc.statics.autoindex);
    assert_ne!(root_loc.id, pub_loc.id);
    let default = r.route(Some(b"unknown"), b"/pub/a").unwrap();
    assert_eq!(default.prefix, "/");
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
