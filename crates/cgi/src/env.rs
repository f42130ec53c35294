//! The program and the environment of a CGI request (RFC 3875 §4.1).

/// The program a request names: the path's first segment after the location's prefix,
/// and the rest as PATH_INFO. `None` for an empty, hidden or dot-dot name.
pub fn split_program<'p>(path: &'p str, prefix: &str) -> Option<(&'p str, &'p str)> {
    let rest = path.strip_prefix(prefix.trim_end_matches('/'))?;
    let rest = rest.strip_prefix('/')?;
    let (program, info) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if program.is_empty() || program.starts_with('.') {
        return None;
    }
    Some((program, info))
}

/// What the environment is made from.
pub struct Request<'a> {
    pub method: &'a str,
    pub protocol: &'a str,
    pub script_name: &'a str,
    pub script_filename: &'a str,
    pub path_info: &'a str,
    pub query: &'a str,
    pub request_uri: &'a str,
    /// The `Host` field as sent (with its port, if any); `None` without one.
    pub host: Option<&'a str>,
    pub server_addr: std::net::SocketAddr,
    pub remote_addr: std::net::SocketAddr,
    /// The request came over TLS: `HTTPS=on`, `REQUEST_SCHEME=https`.
    pub secure: bool,
    pub content_length: Option<u64>,
    /// `DOCUMENT_ROOT`; `PATH_TRANSLATED` is it joined with `PATH_INFO`.
    pub document_root: &'a str,
    /// The user HTTP authentication admitted (`AUTH_TYPE=Basic`, `REMOTE_USER`).
    pub remote_user: Option<&'a str>,
    /// Pass `Authorization` on as `HTTP_AUTHORIZATION` (Apache `CGIPassAuth On`).
    pub pass_auth: bool,
    /// Fields with `_` in their names become variables too.
    pub underscores: bool,
    /// Every header field of the request, in order.
    pub fields: Vec<(&'a [u8], &'a [u8])>,
}

/// `SERVER_NAME` and `SERVER_PORT` as Apache sets them (`UseCanonicalName Off`, its
/// default): the name and port the client put in `Host`; without a port there, the port
/// the connection came in on; without a `Host`, the address it came in on.
fn server_name_and_port(host: Option<&str>, addr: std::net::SocketAddr) -> (String, String) {
    let port = addr.port().to_string();
    let Some(host) = host.filter(|h| !h.is_empty()) else {
        return (addr.ip().to_string(), port);
    };
    let (name, given) = match host.rfind(':') {
        // `[::1]:8080` or `a.example:8080`; a bare IPv6 literal has no port after `]`.
        Some(i)
            if !host[i..].contains(']') && (host.starts_with('[') || !host[..i].contains(':')) =>
        {
            (&host[..i], Some(&host[i + 1..]))
        }
        _ => (host, None),
    };
    let port = match given {
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => p.to_string(),
        _ => port,
    };
    (name.to_string(), port)
}

/// The variables, in a stable order: the meta-variables, then `HTTP_*` for each field,
/// then `extra`. Left out, as Apache leaves them out: Content-Type/-Length (they have
/// their own), `Proxy` (its `HTTP_PROXY` would set the program's outgoing proxy:
/// "httpoxy"), `Authorization` unless passed on (the program learns the user from
/// `REMOTE_USER`, never the password), and names with `_`, which would otherwise become
/// the same variable as their dashed twin (`X_Forwarded_For` spoofing `X-Forwarded-For`)
/// unless the location keeps them.
pub fn environment(r: &Request<'_>, extra: &[(String, String)]) -> Vec<(String, String)> {
    let (server_name, server_port) = server_name_and_port(r.host, r.server_addr);
    let mut env: Vec<(String, String)> = vec![
        ("GATEWAY_INTERFACE".into(), "CGI/1.1".into()),
        ("SERVER_SOFTWARE".into(), "ramjet".into()),
        ("SERVER_PROTOCOL".into(), r.protocol.into()),
        ("SERVER_NAME".into(), server_name),
        ("SERVER_ADDR".into(), r.server_addr.ip().to_string()),
        ("SERVER_PORT".into(), server_port),
        ("REQUEST_METHOD".into(), r.method.into()),
        ("REQUEST_URI".into(), r.request_uri.into()),
        (
            "REQUEST_SCHEME".into(),
            if r.secure { "https" } else { "http" }.into(),
        ),
        ("SCRIPT_NAME".into(), r.script_name.into()),
        ("SCRIPT_FILENAME".into(), r.script_filename.into()),
        ("DOCUMENT_ROOT".into(), r.document_root.into()),
        ("QUERY_STRING".into(), r.query.into()),
        ("REMOTE_ADDR".into(), r.remote_addr.ip().to_string()),
        ("REMOTE_PORT".into(), r.remote_addr.port().to_string()),
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
    ];
    if r.secure {
        env.push(("HTTPS".into(), "on".into()));
    }
    if !r.path_info.is_empty() {
        env.push(("PATH_INFO".into(), r.path_info.into()));
        let root = r.document_root.trim_end_matches('/');
        env.push(("PATH_TRANSLATED".into(), format!("{root}{}", r.path_info)));
    }
    if let Some(user) = r.remote_user {
        env.push(("AUTH_TYPE".into(), "Basic".into()));
        env.push(("REMOTE_USER".into(), user.into()));
    }
    if let Some(n) = r.content_length {
        env.push(("CONTENT_LENGTH".into(), n.to_string()));
    }
    for (name, value) in &r.fields {
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
        let value = String::from_utf8_lossy(value).into_owned();
        if name.eq_ignore_ascii_case("content-type") {
            env.push(("CONTENT_TYPE".into(), value));
            continue;
        }
        if name.eq_ignore_ascii_case("content-length")
            || name.eq_ignore_ascii_case("proxy")
            || (name.eq_ignore_ascii_case("authorization") && !r.pass_auth)
            || (name.contains('_') && !r.underscores)
        {
            continue;
        }
        let var = format!("HTTP_{}", name.to_ascii_uppercase().replace('-', "_"));
        // A repeated field: its values joined, as RFC 9110 §5.3 allows.
        match env.iter_mut().find(|(k, _)| *k == var) {
            Some((_, v)) => {
                v.push_str(", ");
                v.push_str(&value);
            }
            None => env.push((var, value)),
        }
    }
    env.extend(extra.iter().cloned());
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_and_path_info() {
        assert_eq!(
            split_program("/cgi-bin/a.pl", "/cgi-bin/"),
            Some(("a.pl", ""))
        );
        assert_eq!(
            split_program("/cgi-bin/a.pl/x/y", "/cgi-bin/"),
            Some(("a.pl", "/x/y"))
        );
        assert_eq!(
            split_program("/cgi-bin/a.pl/x/y", "/cgi-bin"),
            Some(("a.pl", "/x/y"))
        );
        assert_eq!(split_program("/cgi-bin/", "/cgi-bin/"), None);
        assert_eq!(split_program("/cgi-bin/.hidden", "/cgi-bin/"), None);
        assert_eq!(split_program("/cgi-bin/..", "/cgi-bin/"), None);
        assert_eq!(split_program("/other/a.pl", "/cgi-bin/"), None);
        assert_eq!(split_program("/a.pl", "/"), Some(("a.pl", "")));
    }

    #[test]
    fn the_environment_has_the_meta_variables_and_the_fields() {
        let r = Request {
            method: "POST",
            protocol: "HTTP/1.1",
            script_name: "/cgi-bin/a.pl",
            script_filename: "/srv/cgi/a.pl",
            path_info: "/x",
            query: "q=1",
            request_uri: "/cgi-bin/a.pl/x?q=1",
            host: Some("example.org"),
            server_addr: "127.0.0.1:8080".parse().unwrap(),
            remote_addr: "[::1]:5555".parse().unwrap(),
            secure: false,
            content_length: Some(12),
            document_root: "/srv/www/",
            remote_user: None,
            pass_auth: false,
            underscores: false,
            fields: vec![
                (b"Host", b"example.org"),
                (b"Content-Type", b"text/plain"),
                (b"Content-Length", b"12"),
                (b"X-Thing", b"a"),
                (b"x-thing", b"b"),
                (b"Proxy", b"http://evil"),
            ],
        };
        let env = environment(&r, &[("EXTRA".into(), "1".into())]);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("GATEWAY_INTERFACE"), Some("CGI/1.1"));
        assert_eq!(get("REQUEST_METHOD"), Some("POST"));
        assert_eq!(get("PATH_INFO"), Some("/x"));
        assert_eq!(get("QUERY_STRING"), Some("q=1"));
        assert_eq!(get("REMOTE_ADDR"), Some("::1"));
        assert_eq!(get("REMOTE_PORT"), Some("5555"));
        assert_eq!(get("SERVER_PORT"), Some("8080"));
        assert_eq!(get("CONTENT_LENGTH"), Some("12"));
        assert_eq!(get("CONTENT_TYPE"), Some("text/plain"));
        assert_eq!(get("HTTP_HOST"), Some("example.org"));
        assert_eq!(get("HTTP_X_THING"), Some("a, b"));
        assert_eq!(get("HTTP_PROXY"), None);
        assert_eq!(get("HTTP_CONTENT_LENGTH"), None);
        assert_eq!(get("EXTRA"), Some("1"));
        assert_eq!(get("SERVER_NAME"), Some("example.org"));
        assert_eq!(get("DOCUMENT_ROOT"), Some("/srv/www/"));
        assert_eq!(get("PATH_TRANSLATED"), Some("/srv/www/x"));
        assert_eq!(get("AUTH_TYPE"), None);
    }

    fn sample<'a>(fields: Vec<(&'a [u8], &'a [u8])>) -> Request<'a> {
        Request {
            method: "GET",
            protocol: "HTTP/1.1",
            script_name: "/cgi-bin/p",
            script_filename: "/srv/cgi/p",
            path_info: "",
            query: "",
            request_uri: "/cgi-bin/p",
            host: None,
            server_addr: "127.0.0.1:8080".parse().unwrap(),
            remote_addr: "127.0.0.1:5555".parse().unwrap(),
            secure: false,
            content_length: None,
            document_root: "/srv/cgi",
            remote_user: None,
            pass_auth: false,
            underscores: false,
            fields,
        }
    }

    #[test]
    fn names_with_underscores_cannot_pass_for_their_dashed_twins() {
        let fields: Vec<(&[u8], &[u8])> = vec![
            (b"X_Forwarded_For", b"6.6.6.6"),
            (b"X-Forwarded-For", b"1.1.1.1"),
        ];
        let env = environment(&sample(fields.clone()), &[]);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("HTTP_X_FORWARDED_FOR").as_deref(), Some("1.1.1.1"));
        let mut keep = sample(fields);
        keep.underscores = true;
        let env = environment(&keep, &[]);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(
            get("HTTP_X_FORWARDED_FOR").as_deref(),
            Some("6.6.6.6, 1.1.1.1")
        );
    }

    #[test]
    fn authorization_is_withheld_and_the_user_named() {
        let fields: Vec<(&[u8], &[u8])> = vec![(b"Authorization", b"Basic YTpi")];
        let mut r = sample(fields);
        r.remote_user = Some("alice");
        let env = environment(&r, &[]);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("HTTP_AUTHORIZATION"), None);
        assert_eq!(get("AUTH_TYPE").as_deref(), Some("Basic"));
        assert_eq!(get("REMOTE_USER").as_deref(), Some("alice"));
        r.pass_auth = true;
        let env = environment(&r, &[]);
        assert!(env
            .iter()
            .any(|(k, v)| k == "HTTP_AUTHORIZATION" && v == "Basic YTpi"));
    }

    #[test]
    fn server_name_and_port_follow_the_host_field() {
        let a: std::net::SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let f = |h| server_name_and_port(h, a);
        assert_eq!(f(None), ("127.0.0.1".into(), "8080".into()));
        assert_eq!(f(Some("")), ("127.0.0.1".into(), "8080".into()));
        assert_eq!(f(Some("a.example")), ("a.example".into(), "8080".into()));
        assert_eq!(f(Some("a.example:80")), ("a.example".into(), "80".into()));
        assert_eq!(f(Some("[::1]:81")), ("[::1]".into(), "81".into()));
        assert_eq!(f(Some("[::1]")), ("[::1]".into(), "8080".into()));
        assert_eq!(f(Some("a.example:x")), ("a.example".into(), "8080".into()));
    }
}
