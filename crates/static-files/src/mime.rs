//! Media types by file extension, with per-location overrides and a charset for text.

use std::collections::HashMap;

/// Media type for `name` (a file name or path), e.g. "text/html; charset=utf-8".
pub(crate) fn content_type(
    name: &[u8],
    overrides: &HashMap<String, String>,
    charset: Option<&str>,
) -> String {
    let file = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
    let ext = match file.iter().rposition(|&b| b == b'.') {
        Some(p) if p > 0 => std::str::from_utf8(&file[p + 1..])
            .unwrap_or("")
            .to_ascii_lowercase(),
        _ => String::new(),
    };
    let base: &str = match overrides.get(&ext) {
        Some(t) => t,
        None if ext.is_empty() => "application/octet-stream",
        None => mime_guess::from_ext(&ext)
            .first_raw()
            .unwrap_or("application/octet-stream"),
    };
    match charset {
        Some(cs) if wants_charset(base) => format!("{base}; charset={cs}"),
        _ => base.to_string(),
    }
}

fn wants_charset(t: &str) -> bool {
    !t.contains("charset")
        && (t.starts_with("text/")
            || matches!(
                t,
                "application/javascript" | "application/json" | "application/xml" | "image/svg+xml"
            ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types() {
        let none = HashMap::new();
        assert_eq!(
            content_type(b"/a/index.html", &none, Some("utf-8")),
            "text/html; charset=utf-8"
        );
        assert_eq!(content_type(b"x.PNG", &none, Some("utf-8")), "image/png");
        assert_eq!(
            content_type(b"README", &none, None),
            "application/octet-stream"
        );
        assert_eq!(
            content_type(b".bashrc", &none, None),
            "application/octet-stream"
        );
        let mut o = HashMap::new();
        o.insert("log".to_string(), "text/plain".to_string());
        assert_eq!(
            content_type(b"a.log", &o, Some("utf-8")),
            "text/plain; charset=utf-8"
        );
    }
}
