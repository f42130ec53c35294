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
    pub server_name: &'a str,
    pub server_addr: std::net::SocketAddr,
    pub remote_addr: std::net::SocketAddr,
    pub content_length: Option<u64>,
    /// Every header field of the request, in order.
    pub fields: Vec<(&'a [u8], &'a [u8])>,
}

/// The variables, in a stable order: the meta-variables, then `HTTP_*` for each field
/// (not Content-Type/-Length, which have their own; not `Proxy`, whose `HTTP_PROXY` would
/// set the program's outgoing proxy: "httpoxy"), then `extra`.
pub fn environment(r: &Request<'_>, extra: &[(String, String)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![
        ("GATEWAY_INTERFACE".into(), "CGI/1.1".into()),
        ("SERVER_SOFTWARE".into(), "ramjet".into()),
        ("SERVER_PROTOCOL".into(), r.protocol.into()),
        ("SERVER_NAME".into(), r.server_name.into()),
        ("SERVER_ADDR".into(), r.server_addr.ip().to_string()),
        ("SERVER_PORT".into(), r.server_addr.port().to_string()),
        ("REQUEST_METHOD".into(), r.method.into()),
        ("REQUEST_URI".into(), r.request_uri.into()),
        ("SCRIPT_NAME".into(), r.script_name.into()),
        ("SCRIPT_FILENAME".into(), r.script_filename.into()),
        ("QUERY_STRING".into(), r.query.into()),
        ("REMOTE_ADDR".into(), r.remote_addr.ip().to_string()),
        ("REMOTE_PORT".into(), r.remote_addr.port().to_string()),
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
    ];
    if !r.path_info.is_empty() {
        env.push(("PATH_INFO".into(), r.path_info.into()));
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
        if name.eq_ignore_ascii_case("content-length") || name.eq_ignore_ascii_case("proxy") {
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
            server_name: "example.org",
            server_addr: "127.0.0.1:8080".parse().unwrap(),
            remote_addr: "[::1]:5555".parse().unwrap(),
            content_length: Some(12),
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
    }
}
