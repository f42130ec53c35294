//! The resolved configuration written back as TOML (`ramjet check-config`): every default
//! filled in, paths absolute, sizes and durations in the file's own units. It loads back to
//! the same configuration (a test round-trips it).

use std::fmt::Write;
use std::time::Duration;

use crate::handler::Handler;
use crate::resolved::{Location, Resolved};
use crate::statics::{Encoding, SymlinkPolicy};
use crate::upstream::Balance;
use ramjet_observe::{LogFormat, LogTarget};

/// A TOML string literal (quoted and escaped).
fn text(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let items: Vec<String> = items.into_iter().map(text).collect();
    format!("[{}]", items.join(", "))
}

/// A byte size in the largest unit that divides it.
fn size(n: u64) -> String {
    for (shift, unit) in [(30, "g"), (20, "m"), (10, "k")] {
        if n > 0 && n % (1 << shift) == 0 {
            return text(&format!("{}{unit}", n >> shift));
        }
    }
    n.to_string()
}

fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms % 1000 != 0 {
        return text(&format!("{ms}ms"));
    }
    let s = d.as_secs();
    let t = match s {
        0 => "0s".to_string(),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    };
    text(&t)
}

/// A table key, quoted unless bare.
fn key(k: &str) -> String {
    if !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        k.to_string()
    } else {
        text(k)
    }
}

/// `{ certificate = "...", key = "..." }`.
fn tls_table(f: &crate::TlsFiles) -> String {
    format!(
        "{{ certificate = {}, key = {} }}",
        text(&f.certificate.display().to_string()),
        text(&f.key.display().to_string())
    )
}

impl Resolved {
    /// This configuration as a TOML file.
    pub fn to_toml(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "# {}, resolved: every default filled in", self.source);
        let listen: Vec<String> = self
            .listen
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let tls = self.tls_files.get(i).and_then(Option::as_ref);
                let acme = tls.is_none() && self.tls_of(i).is_some();
                if self.ftp_of(i).is_some() {
                    return format!(
                        "{{ address = {}, protocol = \"ftp\" }}",
                        text(&a.to_string())
                    );
                }
                if !self.expects_proxy_header(i) && tls.is_none() && !acme && self.http2_of(i) {
                    return text(&a.to_string());
                }
                let mut t = format!("{{ address = {}", text(&a.to_string()));
                if self.expects_proxy_header(i) {
                    t.push_str(", proxy_protocol = true");
                }
                if !self.http2_of(i) {
                    t.push_str(", http2 = false");
                }
                if let Some(f) = tls {
                    t.push_str(&format!(", tls = {}", tls_table(f)));
                } else if acme {
                    t.push_str(", tls = \"acme\"");
                }
                t.push_str(" }");
                t
            })
            .collect();
        let _ = writeln!(o, "listen = [{}]", listen.join(", "));
        let _ = writeln!(o, "workers = {}", self.workers);
        let _ = writeln!(o, "pin_workers = {}", self.pin_workers);

        let l = &self.limits;
        let _ = writeln!(o, "\n[limits]");
        let _ = writeln!(o, "max_target = {}", size(l.http1.max_target as u64));
        let _ = writeln!(o, "max_head = {}", size(l.http1.max_head as u64));
        let _ = writeln!(o, "max_body = {}", size(l.max_body));
        let _ = writeln!(o, "max_connections = {}", l.max_connections);
        if let Some(n) = l.max_connections_per_client {
            let _ = writeln!(o, "max_connections_per_client = {n}");
        }
        let _ = writeln!(o, "handoff_batch = {}", l.handoff_batch);
        let _ = writeln!(o, "cgi_processes = {}", l.cgi_processes);
        if let Some(b) = &self.send_rate {
            let _ = writeln!(o, "send_rate = {}", size(b.rate()));
        }
        match l.send_buffer {
            Some(b) => {
                let _ = writeln!(o, "send_buffer = {}", size(b as u64));
            }
            None => o.push_str("# send_buffer: unset (kernel autotuning)\n"),
        }

        let t = &self.timeouts;
        let _ = writeln!(o, "\n[timeouts]");
        for (name, d) in [
            ("header", t.header),
            ("keepalive", t.keepalive),
            ("send", t.send),
            ("shutdown", t.shutdown),
            ("drain", t.drain),
            ("handoff", t.handoff),
            ("cgi", t.cgi),
        ] {
            let _ = writeln!(o, "{name} = {}", duration(d));
        }

        if let Some(f) = &self.ftp {
            let _ = writeln!(o, "\n[ftp]");
            let location = &self.vhosts[f.vhost].locations[f.location];
            let _ = writeln!(o, "location = {}", text(&location.prefix));
            if let Some((lo, hi)) = f.passive_ports {
                let _ = writeln!(o, "passive_ports = \"{lo}-{hi}\"");
            }
            if let Some(a) = f.passive_address {
                let _ = writeln!(o, "passive_address = \"{a}\"");
            }
            let _ = writeln!(o, "idle_timeout = {}", duration(f.idle));
            let _ = writeln!(o, "data_timeout = {}", duration(f.data));
            let _ = writeln!(o, "active = {}", f.active);
            if let Some(t) = &f.tls_files {
                let _ = writeln!(o, "tls = {}", tls_table(t));
            }
            let _ = writeln!(o, "tls_required = {}", f.tls_required);
        }

        let _ = writeln!(o, "\n[log]");
        let target = match &self.access_log.target {
            LogTarget::Off => "off".to_string(),
            LogTarget::Stdout => "stdout".to_string(),
            LogTarget::Stderr => "stderr".to_string(),
            LogTarget::File(p) => p.display().to_string(),
        };
        let format = match self.access_log.format {
            LogFormat::Combined => "combined",
            LogFormat::Common => "common",
            LogFormat::Json => "json",
        };
        let _ = writeln!(o, "access = {}", text(&target));
        let _ = writeln!(o, "format = {}", text(format));
        let _ = writeln!(o, "level = {}", text(&self.log_level));

        let c = &self.file_cache;
        let _ = writeln!(o, "\n[file_cache]");
        let _ = writeln!(o, "entries = {}", c.entries);
        let _ = writeln!(o, "memory = {}", size(c.memory));
        let _ = writeln!(o, "small_file_max = {}", size(c.small_file_max));
        let _ = writeln!(o, "valid = {}", duration(c.valid));
        let _ = writeln!(o, "watch = {}", c.watch);

        for u in &self.upstreams {
            let _ = writeln!(o, "\n[upstream.{}]", key(&u.name));
            let servers: Vec<String> = u
                .servers
                .iter()
                .map(|s| {
                    let a = text(&s.addr.to_string());
                    if s.weight == 1 {
                        a
                    } else {
                        format!("{{ address = {a}, weight = {} }}", s.weight)
                    }
                })
                .collect();
            let _ = writeln!(o, "servers = [{}]", servers.join(", "));
            let balance = match u.balance {
                Balance::RoundRobin => "round-robin",
                Balance::LeastConnections => "least-connections",
                Balance::HashUri => "hash-uri",
                Balance::HashClient => "hash-client",
            };
            let _ = writeln!(o, "balance = {}", text(balance));
            let _ = writeln!(o, "keepalive = {}", u.keepalive);
            for (name, d) in [
                ("keepalive_timeout", u.keepalive_timeout),
                ("connect_timeout", u.connect_timeout),
                ("header_timeout", u.header_timeout),
                ("body_timeout", u.body_timeout),
            ] {
                let _ = writeln!(o, "{name} = {}", duration(d));
            }
            let _ = writeln!(o, "max_fails = {}", u.max_fails);
            let _ = writeln!(o, "fail_timeout = {}", duration(u.fail_timeout));
            if let Some(path) = &u.health_check {
                let _ = writeln!(o, "health_check = {}", text(path));
            }
            let _ = writeln!(o, "health_interval = {}", duration(u.health_interval));
            let _ = writeln!(o, "tries = {}", u.tries);
            let _ = writeln!(o, "retry_non_idempotent = {}", u.retry_non_idempotent);
            let _ = writeln!(
                o,
                "max_response_head = {}",
                size(u.max_response_head as u64)
            );
            if let Some(n) = u.max_conns {
                let _ = writeln!(o, "max_conns = {n}");
            }
            let _ = writeln!(o, "queue_timeout = {}", duration(u.queue_timeout));
        }

        for c in &self.caches {
            let _ = writeln!(o, "\n[cache.{}]", key(&c.name));
            let _ = writeln!(o, "memory = {}", size(c.memory));
            if let Some(d) = &c.disk {
                let _ = writeln!(o, "disk = {}", text(&d.display().to_string()));
                let _ = writeln!(o, "disk_size = {}", size(c.disk_size));
            }
            let _ = writeln!(o, "memory_object_max = {}", size(c.memory_object_max));
            let _ = writeln!(o, "max_object = {}", size(c.max_object));
            let _ = writeln!(o, "identity = {}", text(&c.identity));
        }

        if let Some(a) = &self.acme {
            let _ = writeln!(o, "\n[acme]\ndirectory = {}", text(&a.directory));
            let contact: Vec<&str> = a.contact.iter().map(String::as_str).collect();
            let _ = writeln!(o, "contact = {}", list(contact));
            let _ = writeln!(
                o,
                "state_dir = {}",
                text(&a.state_dir.display().to_string())
            );
            if let Some(ca) = &a.ca_certificate {
                let _ = writeln!(o, "ca_certificate = {}", text(&ca.display().to_string()));
            }
            let _ = writeln!(o, "renew_before = \"{}s\"", a.renew_before.as_secs());
            let _ = writeln!(o, "retry = \"{}s\"", a.retry.as_secs());
            let challenge = if a.tls_alpn { "tls-alpn-01" } else { "http-01" };
            let _ = writeln!(o, "challenge = \"{challenge}\"");
        }

        for v in &self.vhosts {
            let any_host = v.names.iter().any(|n| n == "*") && v.names.len() == 1;
            let table = if any_host {
                "location"
            } else {
                let names: Vec<&str> = v.names.iter().map(String::as_str).collect();
                let _ = writeln!(o, "\n[[vhost]]\nnames = {}", list(names));
                if let Some(f) = &v.tls {
                    let _ = writeln!(o, "tls = {}", tls_table(f));
                } else if v.acme {
                    let _ = writeln!(o, "tls = \"acme\"");
                }
                "vhost.location"
            };
            for loc in &v.locations {
                self.location(&mut o, table, loc);
            }
        }
        o
    }

    fn location(&self, o: &mut String, table: &str, loc: &Location) {
        let _ = writeln!(o, "\n[[{table}]]");
        let _ = writeln!(o, "path = {}", text(&loc.prefix));
        let handlers: Vec<&str> = loc.handlers.iter().map(|h| Handler::name(*h)).collect();
        let _ = writeln!(o, "handlers = {}", list(handlers));
        let _ = writeln!(o, "max_body = {}", size(loc.max_body));
        if let Some(h) = &loc.response_headers {
            let lines: Vec<String> = String::from_utf8_lossy(&h.block)
                .split("\r\n")
                .filter_map(|l| l.split_once(": "))
                .map(|(k, v)| format!("{} = {}", key(k), text(v)))
                .collect();
            if !lines.is_empty() {
                let _ = writeln!(o, "headers = {{ {} }}", lines.join(", "));
            }
            if let Some(d) = h.expires {
                let _ = writeln!(o, "expires = {}", duration(d));
            }
            if !h.by_type.is_empty() {
                let mut types: Vec<String> = h
                    .by_type
                    .iter()
                    .map(|(t, d)| format!("{} = {}", text(t), duration(*d)))
                    .collect();
                types.sort();
                let _ = writeln!(o, "expires_by_type = {{ {} }}", types.join(", "));
            }
        }
        if let Some(a) = &loc.access {
            for (name, rules) in [("allow", &a.allow), ("deny", &a.deny)] {
                if !rules.is_empty() {
                    let texts: Vec<String> = rules.iter().map(|c| c.to_string()).collect();
                    let _ = writeln!(o, "{name} = {}", list(texts.iter().map(String::as_str)));
                }
            }
        }
        if let Some(s) = &loc.shaping {
            for (name, v) in [
                ("limit_rate", s.rate),
                ("limit_rate_client", s.client_rate),
                ("limit_rate_location", s.location.as_ref().map(|b| b.rate())),
            ] {
                if let Some(v) = v {
                    let _ = writeln!(o, "{name} = {}", size(v));
                }
            }
            if s.rate_after > 0 {
                let _ = writeln!(o, "limit_rate_after = {}", size(s.rate_after));
            }
            if let (Some(text), Some((_, burst, _))) = (&s.requests_text, &s.requests) {
                let _ = writeln!(o, "limit_req = {}", crate::print::text(text));
                let _ = writeln!(o, "limit_req_burst = {burst}");
            }
        }
        if let Some(a) = &loc.auth {
            let _ = writeln!(o, "auth_basic = {}", text(&a.realm));
            let file = a.file.display().to_string();
            let _ = writeln!(o, "auth_basic_user_file = {}", text(&file));
        }
        if let Some(p) = &loc.error_pages {
            let pages: Vec<String> = p
                .pages()
                .iter()
                .map(|p| {
                    let status = match p.status {
                        s @ 4..=5 => format!("\"{s}xx\""),
                        s => s.to_string(),
                    };
                    format!("{status} = {}", text(&p.file.display().to_string()))
                })
                .collect();
            let _ = writeln!(o, "error_pages = {{ {} }}", pages.join(", "));
        }
        if let Some(s) = &loc.statics {
            let _ = writeln!(o, "root = {}", text(&s.root_path.display().to_string()));
            let _ = writeln!(o, "autoindex = {}", s.autoindex);
            let _ = writeln!(o, "autoindex_dotfiles = {}", s.autoindex_dotfiles);
            let symlinks = match s.symlinks {
                SymlinkPolicy::InsideRoot => "inside-root",
                SymlinkPolicy::OwnerMatch => "owner-match",
                SymlinkPolicy::Never => "never",
            };
            let _ = writeln!(o, "symlinks = {}", text(symlinks));
            let _ = writeln!(o, "index = {}", list(s.index.iter().map(String::as_str)));
            let encodings: Vec<&str> = s
                .precompressed
                .iter()
                .map(|e| match e {
                    Encoding::Zstd => "zstd",
                    Encoding::Br => "br",
                    Encoding::Gzip => "gzip",
                })
                .collect();
            let _ = writeln!(o, "precompressed = {}", list(encodings));
            let mut types: Vec<(&String, &String)> = s.types.iter().collect();
            types.sort();
            let types: Vec<String> = types
                .into_iter()
                .map(|(k, v)| format!("{} = {}", key(k), text(v)))
                .collect();
            let _ = writeln!(o, "types = {{ {} }}", types.join(", "));
            let _ = writeln!(o, "charset = {}", text(s.charset.as_deref().unwrap_or("")));
            let _ = writeln!(o, "max_ranges = {}", s.max_ranges);
        }
        if let Some(h) = &loc.handoff {
            let _ = writeln!(o, "handoff = {}", text(&h.display().to_string()));
        }
        if let Some(c) = &loc.cgi {
            let _ = writeln!(o, "cgi_root = {}", text(&c.root.display().to_string()));
            if !c.env.is_empty() {
                let env: Vec<String> = c
                    .env
                    .iter()
                    .map(|(k, v)| format!("{} = {}", key(k), text(v)))
                    .collect();
                let _ = writeln!(o, "cgi_env = {{ {} }}", env.join(", "));
            }
            if let Some(u) = &c.user {
                let _ = writeln!(o, "cgi_user = {}", text(&u.name));
            }
            let _ = writeln!(o, "cgi_pass_auth = {}", c.pass_auth);
            let _ = writeln!(o, "underscores_in_headers = {}", c.underscores);
        } else if let Some(p) = &loc.proxy {
            let _ = writeln!(o, "underscores_in_headers = {}", p.underscores);
        }
        if let Some(m) = &loc.module {
            let _ = writeln!(o, "module = {}", text(&m.name));
            if !m.config.is_empty() {
                // An inline table keeps the location's other keys after it in place.
                let config = toml::Value::Table(m.config.clone());
                let _ = writeln!(o, "module_config = {config}");
            }
        }
        if let Some(r) = &loc.redirect {
            let _ = writeln!(o, "redirect = {}", text(&r.target));
            let _ = writeln!(o, "redirect_status = {}", r.status);
        }
        if let Some(p) = &loc.proxy {
            let _ = writeln!(o, "proxy = {}", text(&self.upstreams[p.upstream].name));
            if let Some(path) = &p.path {
                let _ = writeln!(o, "proxy_path = {}", text(path));
            }
            if let Some(host) = &p.host {
                let _ = writeln!(o, "proxy_host = {}", text(host));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::load_str;

    #[test]
    fn an_ftp_configuration_prints_and_loads_back() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("pub")).unwrap();
        let src = "listen = [\"127.0.0.1:0\", { address = \"[::1]:0\", protocol = \"ftp\" }]\n\
                   [ftp]\nlocation = \"/pub/\"\npassive_ports = \"50000-50009\"\n\
                   passive_address = \"192.0.2.1\"\nactive = true\nidle_timeout = \"2m\"\n\
                   [[location]]\npath = \"/pub/\"\nroot = \"pub\"\n";
        let first = load_str(src, "t.toml", dir.path()).unwrap().to_toml();
        let again =
            load_str(&first, "t.toml", dir.path()).unwrap_or_else(|e| panic!("{e}\n{first}"));
        assert_eq!(again.to_toml(), first);
        for expected in [
            "{ address = \"[::1]:0\", protocol = \"ftp\" }",
            "[ftp]\nlocation = \"/pub/\"\npassive_ports = \"50000-50009\"",
            "idle_timeout = \"2m\"",
            "active = true",
        ] {
            assert!(first.contains(expected), "{expected} in\n{first}");
        }
    }

    #[test]
    fn the_printed_configuration_loads_back_to_itself() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("www")).unwrap();
        std::fs::write(dir.path().join("404.html"), "gone").unwrap();
        std::fs::write(dir.path().join("5xx.txt"), "down").unwrap();
        std::fs::write(
            dir.path().join("users"),
            "ann:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\n",
        )
        .unwrap();
        let src = r#"
listen = ["127.0.0.1:0", { address = "[::1]:0", proxy_protocol = true }]
workers = 2
[limits]
max_body = "3m"
send_buffer = "8k"
send_rate = "1g"
max_connections_per_client = 50
[timeouts]
header = "1500ms"
keepalive = "2m"
[log]
access = "off"
format = "json"
[upstream.app]
servers = ["127.0.0.1:8000", { address = "unix:/run/app.sock", weight = 3 }]
balance = "hash-uri"
health_check = "/healthz"
[upstream."odd name"]
servers = ["[::1]:9000"]
[[location]]
root = "www"
handlers = ["static", "proxy"]
proxy = "app"
types = { log = "text/plain", "tar.gz" = "application/gzip" }
precompressed = ["zstd", "gzip"]
charset = ""
[[vhost]]
names = ["a.example", "*.b.example"]
[[vhost.location]]
path = "/api/"
proxy = "odd name"
proxy_path = "/v2/"
proxy_host = "internal"
max_body = 100
headers = { "X-Frame-Options" = "DENY", x-b = "1" }
expires = "1h"
expires_by_type = { "image/" = "30d", "text/html" = 0 }
allow = ["10.0.0.0/8", "::1", "2001:db8::/32"]
deny = ["10.0.0.7", "all"]
error_pages = { 404 = "404.html", "5xx" = "5xx.txt" }
limit_rate = "100k"
limit_rate_after = "1m"
limit_rate_client = "300k"
limit_rate_location = "10m"
limit_req = "600r/m"
limit_req_burst = 5
auth_basic = "Staff only"
auth_basic_user_file = "users"
[[vhost.location]]
path = "/old/"
redirect = "https://new.example/docs/"
redirect_status = 308
"#;
        let first = load_str(src, "t.toml", dir.path()).unwrap().to_toml();
        let again =
            load_str(&first, "t.toml", dir.path()).unwrap_or_else(|e| panic!("{e}\n{first}"));
        assert_eq!(again.to_toml(), first);
        for expected in [
            "header = \"1500ms\"",
            "keepalive = \"2m\"",
            "send_buffer = \"8k\"",
            "{ address = \"[::1]:0\", proxy_protocol = true }",
            "{ address = \"unix:/run/app.sock\", weight = 3 }",
            "[upstream.\"odd name\"]",
            "handlers = [\"static\", \"proxy\"]",
            "names = [\"a.example\", \"*.b.example\"]",
            "[[vhost.location]]",
            "max_body = 100",
            "allow = [\"10.0.0.0/8\", \"::1\", \"2001:db8::/32\"]",
            "deny = [\"10.0.0.7\", \"all\"]",
            "handlers = [\"redirect\"]\n",
            "auth_basic = \"Staff only\"\n",
            "limit_rate = \"100k\"\nlimit_rate_client = \"300k\"\nlimit_rate_location = \"10m\"\nlimit_rate_after = \"1m\"\nlimit_req = \"600r/m\"\nlimit_req_burst = 5\n",
            "404.html\", \"5xx\" = ",
            "redirect = \"https://new.example/docs/\"\nredirect_status = 308\n",
        ] {
            assert!(first.contains(expected), "{expected} missing from\n{first}");
        }
    }
}
