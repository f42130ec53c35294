use super::*;

fn parse(raw: &[u8]) -> Parse<'_> {
    parse_request_head(raw, &Limits::default())
}

fn complete(raw: &[u8]) -> RequestHead<'_> {
    match parse(raw) {
        Parse::Complete(h) => h,
        other => panic!("expected complete, got {other:?}"),
    }
}

fn invalid(raw: &[u8]) -> ErrorKind {
    match parse(raw) {
        Parse::Invalid(k) => k,
        other => panic!("expected invalid, got {other:?}"),
    }
}

#[test]
fn simple_get() {
    let h = complete(b"GET /a?b HTTP/1.1\r\nHost: x\r\nUser-Agent: t\r\n\r\nrest");
    assert_eq!(h.method, Method::Get);
    assert_eq!(h.path, "/a?b");
    assert_eq!(h.host, Some(&b"x"[..]));
    assert!(h.keep_alive);
    assert_eq!(h.framing, BodyFraming::None);
    assert_eq!(h.head_len(), 45);
    assert_eq!(h.request_line(), b"GET /a?b HTTP/1.1");
}

#[test]
fn keep_alive_rules() {
    assert!(!complete(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").keep_alive);
    assert!(!complete(b"GET / HTTP/1.0\r\n\r\n").keep_alive);
    assert!(complete(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
    assert!(!complete(b"GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n").keep_alive);
}

#[test]
fn partial_until_blank_line() {
    assert!(matches!(
        parse(b"GET / HTTP/1.1\r\nHost: x\r\n"),
        Parse::Partial
    ));
    assert!(matches!(parse(b"GE"), Parse::Partial));
    assert!(matches!(parse(b""), Parse::Partial));
}

#[test]
fn leading_empty_lines_are_skipped() {
    let h = complete(b"\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(h.path, "/");
    assert_eq!(h.request_line(), b"GET / HTTP/1.1");
}

#[test]
fn host_required_on_11_and_unique() {
    assert_eq!(invalid(b"GET / HTTP/1.1\r\n\r\n"), ErrorKind::BadRequest);
    assert_eq!(
        invalid(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
        ErrorKind::BadRequest
    );
    assert_eq!(
        invalid(b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n"),
        ErrorKind::BadRequest
    );
    assert!(complete(b"GET / HTTP/1.0\r\n\r\n").host.is_none());
}

#[test]
fn absolute_form_overrides_host() {
    let h = complete(b"GET http://Example.com:81/p?q HTTP/1.1\r\nHost: other\r\n\r\n");
    assert_eq!(h.host, Some(&b"Example.com:81"[..]));
    assert_eq!(h.path, "/p?q");
    let h = complete(b"GET http://e.com HTTP/1.1\r\nHost: e.com\r\n\r\n");
    assert_eq!(h.path, "/");
    assert_eq!(
        invalid(b"GET ftp://e.com/ HTTP/1.1\r\nHost: e\r\n\r\n"),
        ErrorKind::BadRequest
    );
    assert_eq!(
        invalid(b"GET http://u@e.com/ HTTP/1.1\r\nHost: e\r\n\r\n"),
        ErrorKind::BadRequest
    );
}

#[test]
fn malformed_heads_are_400() {
    for raw in [
        &b"GET / HTTP/1.1\r\nHost x\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost : x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nFoo: a\r\n  folded\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\n\tfolded\r\n\r\n",
        b"GET  / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"G(T / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1 extra\r\nHost: x\r\n\r\n",
        b"GET /\x00 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/x.y\r\nHost: x\r\n\r\n",
        b"GET * HTTP/1.1\r\nHost: x\r\n\r\n",
    ] {
        assert_eq!(
            invalid(raw),
            ErrorKind::BadRequest,
            "{:?}",
            String::from_utf8_lossy(raw)
        );
    }
}

#[test]
fn unsupported_versions_are_505() {
    assert_eq!(
        invalid(b"GET / HTTP/2.0\r\nHost: x\r\n\r\n"),
        ErrorKind::VersionNotSupported
    );
    assert_eq!(
        invalid(b"GET / HTTP/1.2\r\nHost: x\r\n\r\n"),
        ErrorKind::VersionNotSupported
    );
    assert_eq!(
        invalid(b"GET / HTTP/3\r\nHost: x\r\n\r\n"),
        ErrorKind::VersionNotSupported
    );
}

#[test]
fn unknown_method_is_parsed_for_the_pipeline() {
    let h = complete(b"BREW /pot HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(h.method, Method::Other);
    assert_eq!(h.method_token, "BREW");
}

#[test]
fn content_length_rules() {
    let h = complete(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n");
    assert_eq!(h.framing, BodyFraming::Length(5));
    let h =
        complete(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\nContent-Length: 5\r\n\r\n");
    assert_eq!(h.framing, BodyFraming::Length(5));
    for raw in [
        &b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0x10\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: \r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n",
    ] {
        assert_eq!(
            invalid(raw),
            ErrorKind::BadRequest,
            "{:?}",
            String::from_utf8_lossy(raw)
        );
    }
}

#[test]
fn transfer_encoding_rules() {
    let h = complete(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert_eq!(h.framing, BodyFraming::Chunked);
    let h = complete(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n");
    assert_eq!(h.framing, BodyFraming::Chunked);
    assert_eq!(
        invalid(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"),
        ErrorKind::BadRequest
    );
    assert_eq!(
        invalid(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"),
        ErrorKind::BadRequest
    );
    assert_eq!(
        invalid(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
        ErrorKind::NotImplementedCoding
    );
    assert_eq!(
        invalid(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"),
        ErrorKind::BadRequest
    );
    assert_eq!(
        invalid(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"),
        ErrorKind::BadRequest
    );
    assert_eq!(
        invalid(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n"),
        ErrorKind::BadRequest
    );
}

#[test]
fn limits() {
    let limits = Limits {
        max_target: 100,
        max_head: 300,
    };
    let long_target = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(200));
    assert!(matches!(
        parse_request_head(long_target.as_bytes(), &limits),
        Parse::Invalid(ErrorKind::UriTooLong)
    ));
    let open_line = format!("GET /{}", "a".repeat(200));
    assert!(matches!(
        parse_request_head(open_line.as_bytes(), &limits),
        Parse::Invalid(ErrorKind::UriTooLong)
    ));
    let big_head = format!("GET / HTTP/1.1\r\nHost: x\r\nX: {}\r\n", "a".repeat(400));
    assert!(matches!(
        parse_request_head(big_head.as_bytes(), &limits),
        Parse::Invalid(ErrorKind::HeadersTooLarge)
    ));
    let big_complete = format!("{big_head}\r\n");
    assert!(matches!(
        parse_request_head(big_complete.as_bytes(), &limits),
        Parse::Invalid(ErrorKind::HeadersTooLarge)
    ));
    let mut many = String::from("GET / HTTP/1.1\r\nHost: x\r\n");
    for i in 0..MAX_HEADERS {
        many.push_str(&format!("X-{i}: v\r\n"));
    }
    many.push_str("\r\n");
    assert_eq!(invalid(many.as_bytes()), ErrorKind::HeadersTooLarge);
}

#[test]
fn conditional_fields_are_kept() {
    let h = complete(
        b"GET / HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1\r\nIf-Range: \"e\"\r\nIf-None-Match: \"e\"\r\nIf-Modified-Since: d\r\nIf-Match: *\r\nIf-Unmodified-Since: u\r\nAccept-Encoding: gzip\r\nAccept: a/b\r\nReferer: r\r\nExpect: 100-continue\r\n\r\n",
    );
    assert_eq!(h.range, Some(&b"bytes=0-1"[..]));
    assert_eq!(h.if_range, Some(&b"\"e\""[..]));
    assert_eq!(h.if_none_match, Some(&b"\"e\""[..]));
    assert_eq!(h.if_modified_since, Some(&b"d"[..]));
    assert_eq!(h.if_match, Some(&b"*"[..]));
    assert_eq!(h.if_unmodified_since, Some(&b"u"[..]));
    assert_eq!(h.accept_encoding, Some(&b"gzip"[..]));
    assert_eq!(h.accept, Some(&b"a/b"[..]));
    assert_eq!(h.referer, Some(&b"r"[..]));
    assert!(h.expect_continue);
}

/// The walk `fields` replaced: the head split into lines byte by byte.
fn fields_by_split(raw: &[u8]) -> Vec<(&[u8], &[u8])> {
    raw.split(|&b| b == b'\n')
        .skip_while(|l| l.is_empty() || *l == b"\r")
        .skip(1)
        .filter_map(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let colon = line.iter().position(|&b| b == b':')?;
            Some((&line[..colon], line[colon + 1..].trim_ascii()))
        })
        .collect()
}

#[test]
fn fields_are_the_lines_after_the_request_line() {
    let h = complete(b"\r\nGET / HTTP/1.1\r\nHost: x\r\nA:  b c \r\nEmpty:\r\n\r\n");
    let fields: Vec<_> = h.fields().collect();
    assert_eq!(
        fields,
        [(&b"Host"[..], &b"x"[..]), (b"A", b"b c"), (b"Empty", b"")]
    );
    assert_eq!(h.field(b"a"), Some(&b"b c"[..]));
    assert_eq!(h.field(b"missing"), None);
}

proptest::proptest! {
    #[test]
    fn fields_walk_the_lines_as_splitting_them_did(
        bytes in proptest::collection::vec(
            proptest::sample::select(vec![b'\n', b'\r', b':', b' ', b'\t', b'a', b'B']),
            0..128,
        )
    ) {
        let mut h = complete(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        h.raw = &bytes;
        proptest::prop_assert_eq!(h.fields().collect::<Vec<_>>(), fields_by_split(&bytes));
    }

    #[test]
    fn never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
        let _ = parse(&bytes);
    }
}

#[test]
fn the_host_table_allows_exactly_the_rfc_3986_host_bytes() {
    let by_match = |b: u8| {
        b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b':'
                    | b'['
                    | b']'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b'%'
            )
    };
    for b in 0..=255u8 {
        assert_eq!(valid_host(&[b]), by_match(b), "byte {b}");
    }
    assert!(!valid_host(b""));
    assert!(valid_host(b"127.0.0.1:8080"));
    assert!(valid_host(b"[::1]:443"));
    assert!(!valid_host(b"a b"));
    assert!(!valid_host(b"a/b"));
}
