//! Validation of every SPECweb99 reply (specweb99.md §4.5): status, the file's header line
//! and size, the dynamic frame with its `QUERY_STRING` echo, the cookies, the ad and its
//! substitution.

use ramjet_specweb::fileset::{file_name, file_size, tags_in_class};
use ramjet_specweb::frame::TAIL;
use ramjet_specweb::tables::{ad_target, ADS, MAX_AD_WEIGHT};

/// The kinds of request in the mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    Static,
    Dynamic,
    Cad,
    Post,
    Cgi,
}

impl Op {
    pub const ALL: [Op; 5] = [Op::Static, Op::Dynamic, Op::Cad, Op::Post, Op::Cgi];

    pub fn name(self) -> &'static str {
        match self {
            Op::Static => "static GET",
            Op::Dynamic => "dynamic GET",
            Op::Cad => "CAD GET",
            Op::Post => "POST",
            Op::Cgi => "CGI GET",
        }
    }
}

/// What was asked.
#[derive(Debug, Clone)]
pub struct Sent {
    pub op: Op,
    pub dir: u32,
    pub class: u32,
    pub num: u32,
    /// The query sent (dynamic GETs; empty for POST and static).
    pub query: String,
    /// The user of a CAD or POST.
    pub user: u64,
}

fn set_cookie<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        if !n.trim().eq_ignore_ascii_case("set-cookie") {
            return None;
        }
        v.trim().strip_prefix(name)?.strip_prefix('=')
    })
}

/// Check one reply; for a CAD, returns the ad it carried (the next CAD's `last_ad`).
pub fn check(
    sent: &Sent,
    status: u16,
    head: &str,
    body: &[u8],
    expired: &[bool],
) -> Result<Option<u32>, String> {
    if status != 200 {
        return Err(format!("status {status}"));
    }
    let name = file_name(u64::from(sent.dir), sent.class, sent.num);
    let size = file_size(sent.class, sent.num) as usize;
    let header = format!("{size:9} {name}\n");
    if sent.op == Op::Static {
        if body.len() != size {
            return Err(format!(
                "bad file size: expected={size}, returned={}",
                body.len()
            ));
        }
        if !body.starts_with(header.as_bytes()) {
            return Err(format!("bad url name: requested={name}"));
        }
        return Ok(None);
    }
    let echo = format!("<p>QUERY_STRING = {}\n<pre>\n", sent.query);
    let Some(at) = memchr::memmem::find(body, echo.as_bytes()) else {
        return Err("bad QUERY".into());
    };
    let file = &body[at + echo.len()..];
    if !file.starts_with(header.as_bytes()) {
        return Err(format!("bad url name: requested={name}"));
    }
    if !file.ends_with(TAIL) || file.len() != size + TAIL.len() {
        return Err(format!(
            "bad file size: expected={size}, returned={}",
            file.len().saturating_sub(TAIL.len())
        ));
    }
    match sent.op {
        Op::Post => match set_cookie(head, "my_cookie") {
            Some(v) if v == sent.user.to_string() => Ok(None),
            _ => Err("Bad my_cookie value".into()),
        },
        Op::Cad => {
            let v = set_cookie(head, "found_cookie").ok_or("no found_cookie")?;
            let mut ad = None;
            let mut weight = None;
            let mut exp = None;
            for pair in v.split('&') {
                match pair.split_once('=') {
                    Some(("Ad_id", a)) => ad = a.parse::<i64>().ok(),
                    Some(("Ad_weight", w)) => weight = w.parse::<i64>().ok(),
                    Some(("Expired", e)) => exp = e.parse::<u8>().ok(),
                    _ => {}
                }
            }
            let (Some(ad), Some(weight), Some(exp)) = (ad, weight, exp) else {
                return Err(format!("bad found_cookie {v:?}"));
            };
            if !(0..i64::from(ADS)).contains(&ad) {
                return Err(format!("Ad_id {ad} not in range"));
            }
            if !(0..=i64::from(MAX_AD_WEIGHT)).contains(&weight) {
                return Err(format!("Ad_weight {weight} not in range"));
            }
            let ad = ad as u32;
            match (expired.get(ad as usize).copied().unwrap_or(false), exp) {
                (true, 1) | (false, 0) => {}
                (true, _) => return Err(format!("Expected Expired Ad {ad}")),
                (false, _) => return Err(format!("Invalid Expired Ad {ad}")),
            }
            let tag = [b"<IMG SRC=\"/file_set/".as_slice(), &ad_target(ad), b"\">"].concat();
            let found = file
                .windows(tag.len())
                .filter(|w| *w == tag.as_slice())
                .count();
            if found != tags_in_class(sent.class) {
                return Err(format!(
                    "ad {ad} substituted in {found} tags, expected {}",
                    tags_in_class(sent.class)
                ));
            }
            Ok(Some(ad))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ramjet_specweb::fileset::file_bytes;

    fn framed(query: &str, file: &[u8]) -> Vec<u8> {
        let mut b = format!(
            "<html>\n<head><title>SPECweb99 Dynamic GET & POST Test</title></head>\n<body>\n<p>SERVER_SOFTWARE = x\n<p>REMOTE_ADDR = 1.2.3.4\n<p>SCRIPT_NAME = /s\n<p>QUERY_STRING = {query}\n<pre>\n"
        )
        .into_bytes();
        b.extend_from_slice(file);
        b.extend_from_slice(TAIL);
        b
    }

    fn sent(op: Op, class: u32) -> Sent {
        Sent {
            op,
            dir: 3,
            class,
            num: 4,
            query: if op == Op::Post {
                String::new()
            } else {
                format!("/{}", file_name(3, class, 4))
            },
            user: 10042,
        }
    }

    #[test]
    fn static_and_dynamic_replies() {
        let f = file_bytes(3, 1, 4);
        let s = sent(Op::Static, 1);
        assert_eq!(check(&s, 200, "", &f, &[]), Ok(None));
        assert!(check(&s, 404, "", &f, &[]).unwrap_err().contains("status"));
        assert!(check(&s, 200, "", &f[1..], &[])
            .unwrap_err()
            .contains("size"));
        let d = sent(Op::Dynamic, 1);
        assert_eq!(check(&d, 200, "", &framed(&d.query, &f), &[]), Ok(None));
        assert_eq!(
            check(&d, 200, "", &framed("/x", &f), &[]),
            Err("bad QUERY".into())
        );
        let mut wrong = f.clone();
        wrong.push(b'x');
        assert!(check(&d, 200, "", &framed(&d.query, &wrong), &[])
            .unwrap_err()
            .contains("size"));
        let other = file_bytes(3, 1, 5);
        assert!(check(&d, 200, "", &framed(&d.query, &other), &[])
            .unwrap_err()
            .contains("url name"));
    }

    #[test]
    fn post_and_cad_cookies() {
        let f = file_bytes(3, 2, 4);
        let p = sent(Op::Post, 2);
        let body = framed("", &f);
        assert_eq!(
            check(&p, 200, "Set-Cookie: my_cookie=10042", &body, &[]),
            Ok(None)
        );
        assert!(check(&p, 200, "Set-Cookie: my_cookie=10043", &body, &[]).is_err());
        assert!(check(&p, 200, "", &body, &[]).is_err());

        let c = sent(Op::Cad, 2);
        let mut sub = f.clone();
        while let Some(i) = sub.windows(17).position(|w| w == b"dirNNNNN/classX_Y") {
            sub[i..i + 17].copy_from_slice(&ad_target(50));
        }
        let body = framed(&c.query, &sub);
        let mut expired = vec![false; 360];
        let head = "Set-Cookie: found_cookie=Ad_id=50&Ad_weight=20&Expired=0";
        assert_eq!(check(&c, 200, head, &body, &expired), Ok(Some(50)));
        expired[50] = true;
        assert!(check(&c, 200, head, &body, &expired)
            .unwrap_err()
            .contains("Expected Expired"));
        expired[50] = false;
        let bad = "Set-Cookie: found_cookie=Ad_id=360&Ad_weight=20&Expired=0";
        assert!(check(&c, 200, bad, &body, &expired)
            .unwrap_err()
            .contains("not in range"));
        let heavy = "Set-Cookie: found_cookie=Ad_id=50&Ad_weight=76&Expired=0";
        assert!(check(&c, 200, heavy, &body, &expired).is_err());
        // The file unsubstituted, or substituted with another ad.
        assert!(check(&c, 200, head, &framed(&c.query, &f), &expired)
            .unwrap_err()
            .contains("substituted"));
        let other = "Set-Cookie: found_cookie=Ad_id=51&Ad_weight=20&Expired=0";
        assert!(check(&c, 200, other, &body, &expired).is_err());
    }
}
