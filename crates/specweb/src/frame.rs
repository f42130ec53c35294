//! The frame around every SPECweb99 dynamic reply (specweb99.md §3.1): written by the
//! module, checked by the client.
//!
//! The spec shows the file's bytes on the lines between `<pre>` and `</pre>`; a file need
//! not end with a newline, so, as TUX's module does, a newline comes before `</pre>`
//! (UNCONFIRMED in the spec; the client in `ramjet specweb` checks this exact frame).

/// The bytes before the file. Built by appending, not `format!`: it is on every dynamic
/// reply's path, and in a WebAssembly module formatting costs several times more.
pub fn head(server: &str, remote: &str, script: &str, query: &str) -> String {
    let parts = [
        "<html>\n<head><title>SPECweb99 Dynamic GET & POST Test</title></head>\n<body>\n\
         <p>SERVER_SOFTWARE = ",
        server,
        "\n<p>REMOTE_ADDR = ",
        remote,
        "\n<p>SCRIPT_NAME = ",
        script,
        "\n<p>QUERY_STRING = ",
        query,
        "\n<pre>\n",
    ];
    let mut head = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for p in parts {
        head.push_str(p);
    }
    head
}

/// The bytes after the file.
pub const TAIL: &[u8] = b"\n</pre>\n</body></html>\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frame_is_the_specs() {
        let h = head(
            "ramjet",
            "10.0.0.1",
            "/specweb",
            "/file_set/dir00001/class1_2",
        );
        assert_eq!(
            h,
            "<html>\n<head><title>SPECweb99 Dynamic GET & POST Test</title></head>\n<body>\n\
             <p>SERVER_SOFTWARE = ramjet\n<p>REMOTE_ADDR = 10.0.0.1\n<p>SCRIPT_NAME = /specweb\n\
             <p>QUERY_STRING = /file_set/dir00001/class1_2\n<pre>\n"
        );
        assert!(h.lines().all(|l| !l.starts_with(' ')));
    }
}
