//! The redirect handler (Apache `Redirect`, nginx `return 301`): a location answers every
//! request with a redirect to its `redirect` target, the location's prefix replaced by the
//! target and the rest of the path and the query kept: with `path = "/old/"` and
//! `redirect = "https://new.example/docs/"`, `/old/a/b?x=1` goes to
//! `https://new.example/docs/a/b?x=1`. Any method: 307 and 308 keep it.
#![forbid(unsafe_code)]

use ramjet_pipeline::{error_response, Content, Later, Outcome, Request};

/// The redirect handler (stateless; one per worker like every handler).
#[derive(Debug, Default)]
pub struct Redirect;

impl Redirect {
    pub fn new() -> Redirect {
        Redirect
    }
}

/// The `Location` for `req` under a location redirecting to `target`.
pub fn location_of(target: &str, prefix: &str, path: &[u8], query: Option<&str>) -> Vec<u8> {
    // The rest keeps the slash the prefix ends with, so `/` → `https://x.example` joins as
    // `https://x.example/foo`, not `https://x.examplefoo`.
    let keep = prefix.len() - usize::from(prefix.ends_with('/'));
    let rest = if path.starts_with(prefix.as_bytes()) {
        &path[keep..]
    } else {
        b""
    };
    ramjet_http1::path::rebase(target, rest, query)
}

impl Content for Redirect {
    fn produce<'r>(&'r self, req: &'r Request<'r>) -> Result<Outcome, Later<'r>> {
        let Some(r) = req.location.redirect.as_ref() else {
            return Ok(Outcome::Declined);
        };
        let location = location_of(&r.target, &req.location.prefix, req.path, req.query);
        Ok(Outcome::Respond(
            error_response(r.status).header("Location", &location),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rest_of_the_path_and_the_query_follow() {
        let l =
            |t, p, path: &str, q| String::from_utf8(location_of(t, p, path.as_bytes(), q)).unwrap();
        assert_eq!(
            l(
                "https://new.example/docs/",
                "/old/",
                "/old/a/b",
                Some("x=1")
            ),
            "https://new.example/docs/a/b?x=1"
        );
        assert_eq!(
            l("https://new.example/docs/", "/old/", "/old/", None),
            "https://new.example/docs/"
        );
        assert_eq!(l("/new", "/old", "/old/a b", None), "/new/a%20b");
        assert_eq!(l("https://x.example", "/", "/", None), "https://x.example/");
        assert_eq!(
            l("https://x.example", "/", "/foo", None),
            "https://x.example/foo"
        );
        assert_eq!(
            l("https://x.example/", "/", "/foo", None),
            "https://x.example/foo"
        );
    }
}
