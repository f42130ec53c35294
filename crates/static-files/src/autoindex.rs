//! Directory listings: HTML in the spirit of Apache's fancy index, and JSON for mirror tools
//! (nginx `autoindex_format json` fields plus exact Unix times). Rendered on the blocking
//! pool, since it reads the directory and stats every entry.

use std::fmt::Write as _;
use std::fs::File;
use std::io::Read;
use std::time::UNIX_EPOCH;

use ramjet_runtime::sys::{self, OpenPolicy};

/// Largest HEADER.html / README.html inlined into a listing.
const MAX_INCLUDE: u64 = 64 * 1024;

/// One row of a listing.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) name: Vec<u8>,
    pub(crate) is_dir: bool,
    pub(crate) size: u64,
    pub(crate) mtime: u64,
    /// The entry could not be opened (no permission, a broken or escaping symlink): it is
    /// listed as such, without size, time or link, rather than left out.
    pub(crate) unreadable: bool,
}

/// What a location's listing shows.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Options {
    /// Names starting with a dot (hidden by default).
    pub(crate) dotfiles: bool,
}

/// Listing format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Html,
    Json,
}

/// Column and order, from Apache-style `?C=N;O=D` queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sort {
    column: u8,
    descending: bool,
}

impl Sort {
    pub(crate) fn from_query(query: Option<&str>) -> Sort {
        let mut sort = Sort {
            column: b'N',
            descending: false,
        };
        for kv in query.unwrap_or("").split([';', '&']) {
            match kv.as_bytes() {
                [b'C', b'=', c] if matches!(c, b'N' | b'M' | b'S') => sort.column = *c,
                [b'O', b'=', o] => sort.descending = *o == b'D',
                _ => {}
            }
        }
        sort
    }
}

/// Read the directory (dot-files only when `options.dotfiles`; entries that cannot be
/// opened are kept, marked unreadable).
pub(crate) fn read(dir: &File, options: Options) -> std::io::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for name in sys::blocking_read_dir(dir)? {
        if name == b"." || name == b".." || (name.starts_with(b".") && !options.dotfiles) {
            continue;
        }
        // Follow symlinks only beneath the directory, like file serving does.
        let row = match sys::open_beneath(dir, &name, OpenPolicy::Beneath) {
            Ok((_, st)) => Row {
                is_dir: st.is_dir,
                size: if st.is_dir { 0 } else { st.size },
                mtime: st
                    .mtime
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
                unreadable: false,
                name,
            },
            Err(_) => Row {
                is_dir: false,
                size: 0,
                mtime: 0,
                unreadable: true,
                name,
            },
        };
        rows.push(row);
    }
    Ok(rows)
}

fn sort_rows(rows: &mut [Row], sort: Sort) {
    rows.sort_by(|a, b| {
        // Directories first, as Apache's FoldersFirst.
        let dirs = b.is_dir.cmp(&a.is_dir);
        let by = match sort.column {
            b'M' => a.mtime.cmp(&b.mtime),
            b'S' => a.size.cmp(&b.size),
            _ => a.name.cmp(&b.name),
        };
        dirs.then(if sort.descending { by.reverse() } else { by })
            .then_with(|| a.name.cmp(&b.name))
    });
}

/// The listing as JSON: `[{"name", "type", "mtime", "mtime_unix", "size"}]`.
pub(crate) fn json(mut rows: Vec<Row>, sort: Sort) -> Vec<u8> {
    sort_rows(&mut rows, sort);
    let list: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            if r.unreadable {
                return serde_json::json!({
                    "name": String::from_utf8_lossy(&r.name),
                    "type": "unreadable",
                });
            }
            let mut v = serde_json::json!({
                "name": String::from_utf8_lossy(&r.name),
                "type": if r.is_dir { "directory" } else { "file" },
                "mtime": httpdate::fmt_http_date(UNIX_EPOCH + std::time::Duration::from_secs(r.mtime)),
                "mtime_unix": r.mtime,
            });
            if !r.is_dir {
                v["size"] = r.size.into();
            }
            v
        })
        .collect();
    let mut out = serde_json::to_vec_pretty(&list).unwrap_or_default();
    out.push(b'\n');
    out
}

/// The listing as HTML. `display_path` is the decoded request path.
pub(crate) fn html(dir: &File, mut rows: Vec<Row>, sort: Sort, display_path: &[u8]) -> Vec<u8> {
    sort_rows(&mut rows, sort);
    let title = escape_html(&String::from_utf8_lossy(display_path));
    let mut out = String::with_capacity(4096 + rows.len() * 200);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n<title>Index of {title}</title>\n<style>body{{font-family:sans-serif}}td,th{{padding:0 1em 0 0;text-align:left;white-space:nowrap}}td:first-child{{white-space:normal;overflow-wrap:anywhere}}td.s{{text-align:right}}</style>\n</head>\n<body>\n"
    );
    match include(dir, b"HEADER.html") {
        Some(h) => out.push_str(&h),
        None => {
            let _ = writeln!(out, "<h1>Index of {title}</h1>");
        }
    }
    // The sorted column is marked with its direction; clicking it again reverses it.
    let link = |c: u8, label: &str| {
        let current = sort.column == c;
        let order = if current && !sort.descending {
            'D'
        } else {
            'A'
        };
        let mark = match (current, sort.descending) {
            (true, false) => " \u{25b2}",
            (true, true) => " \u{25bc}",
            _ => "",
        };
        format!("<a href=\"?C={};O={order}\">{label}</a>{mark}", c as char)
    };
    let _ = writeln!(
        out,
        "<table>\n<tr><th>{}</th><th>{}</th><th>{}</th><th>Bytes</th></tr>",
        link(b'N', "Name"),
        link(b'M', "Last modified"),
        link(b'S', "Size")
    );
    // The root has no parent to go to.
    if display_path != b"/" {
        out.push_str("<tr><td colspan=\"4\"><a href=\"../\">Parent Directory</a></td></tr>\n");
    }
    for r in &rows {
        if r.unreadable {
            let shown = escape_html(&String::from_utf8_lossy(&r.name));
            let _ = writeln!(
                out,
                "<tr><td>{shown}</td><td>-</td><td class=\"s\">unreadable</td><td></td></tr>"
            );
            continue;
        }
        let shown = escape_html(&String::from_utf8_lossy(&r.name));
        let slash = if r.is_dir { "/" } else { "" };
        let when = civil(r.mtime);
        let (human, exact) = if r.is_dir {
            ("-".to_string(), String::new())
        } else {
            (human_size(r.size), r.size.to_string())
        };
        let _ = writeln!(
            out,
            "<tr><td><a href=\"{}{slash}\">{shown}{slash}</a></td><td>{when}</td><td class=\"s\">{human}</td><td class=\"s\">{exact}</td></tr>",
            percent_encode(&r.name)
        );
    }
    out.push_str("</table>\n");
    if let Some(readme) = include(dir, b"README.html") {
        out.push_str(&readme);
    }
    out.push_str("<hr>\n<address>ramjet</address>\n</body>\n</html>\n");
    out.into_bytes()
}

fn include(dir: &File, name: &[u8]) -> Option<String> {
    let (mut f, st) = sys::open_beneath(dir, name, OpenPolicy::Beneath).ok()?;
    if !st.is_file || st.size > MAX_INCLUDE {
        return None;
    }
    let mut s = String::new();
    f.read_to_string(&mut s).ok()?;
    Some(s)
}

/// `&`, `<`, `>`, `"`, `'` as entities.
pub(crate) fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encode everything but unreserved characters (RFC 3986 §2.3), so names with
/// spaces, `%`, `#`, `?`, `+`, quotes or UTF-8 link correctly; a leading "./" keeps a name
/// with a colon from reading as a scheme.
pub(crate) fn percent_encode(name: &[u8]) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    if name.contains(&b':') {
        out.push_str("./");
    }
    for &b in name {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

fn human_size(n: u64) -> String {
    const UNITS: [&str; 6] = ["", "K", "M", "G", "T", "P"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n}")
    } else if v < 10.0 {
        format!("{v:.1}{}", UNITS[u])
    } else {
        format!("{v:.0}{}", UNITS[u])
    }
}

/// "2026-11-21 20:15" (UTC).
fn civil(secs: u64) -> String {
    let t = httpdate::HttpDate::from(UNIX_EPOCH + std::time::Duration::from_secs(secs));
    let text = t.to_string(); // "Sat, 21 Nov 2026 20:15:22 GMT"
    let parts: Vec<&str> = text.split(' ').collect();
    if parts.len() < 5 {
        return text;
    }
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS
        .iter()
        .position(|m| *m == parts[2])
        .map_or(0, |m| m + 1);
    format!("{}-{month:02}-{} {}", parts[3], parts[1], &parts[4][..5])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping() {
        assert_eq!(
            escape_html("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(percent_encode(b"a b%#?+\"'"), "a%20b%25%23%3F%2B%22%27");
        assert_eq!(percent_encode("é".as_bytes()), "%C3%A9");
        assert_eq!(percent_encode(b"c:d"), "./c%3Ad");
    }

    #[test]
    fn sizes_and_dates() {
        assert_eq!(human_size(999), "999");
        assert_eq!(human_size(1536), "1.5K");
        assert_eq!(human_size(5 << 30), "5.0G");
        assert_eq!(civil(784_111_777), "1994-11-06 08:49");
        assert_eq!(
            Sort::from_query(Some("C=S;O=D")),
            Sort {
                column: b'S',
                descending: true
            }
        );
    }
}
