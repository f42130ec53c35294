use super::*;
use std::time::Duration;

fn rule(ttl: Option<u64>) -> CacheRule {
    CacheRule {
        zone: 0,
        identity: "ramjet".into(),
        ttl: ttl.map(Duration::from_secs),
        ignore_set_cookie: false,
        key: Vec::new(),
        purge: Vec::new(),
    }
}

fn store(status: u16, fields: &str) -> Result<Freshness, &'static str> {
    storable(
        &Asked::default(),
        &Answer {
            status,
            fields: fields.as_bytes(),
        },
        &rule(None),
        1_000_000,
        1_000_000,
    )
}

#[test]
fn storability() {
    assert_eq!(store(200, "Cache-Control: no-store\r\n"), Err("no-store"));
    assert_eq!(store(200, "Cache-Control: private\r\n"), Err("private"));
    assert_eq!(store(200, "Set-Cookie: a=b\r\n"), Err("set-cookie"));
    assert_eq!(store(200, "Vary: a, *\r\n"), Err("vary *"));
    assert_eq!(store(206, "Cache-Control: max-age=5\r\n"), Err("status"));
    assert_eq!(store(500, ""), Err("no freshness"));
    assert!(store(500, "Cache-Control: max-age=5\r\n").is_ok());
    assert_eq!(store(200, "").unwrap().lifetime_ms, 0);
    let a = Asked {
        authorization: true,
        ..Default::default()
    };
    let ans = Answer {
        status: 200,
        fields: b"Cache-Control: max-age=5\r\n",
    };
    assert_eq!(storable(&a, &ans, &rule(None), 0, 0), Err("authorization"));
    let ans = Answer {
        status: 200,
        fields: b"Cache-Control: max-age=5, public\r\n",
    };
    assert!(storable(&a, &ans, &rule(None), 0, 0).is_ok());
}

#[test]
fn lifetimes() {
    assert_eq!(
        store(200, "Cache-Control: max-age=60\r\n")
            .unwrap()
            .lifetime_ms,
        60_000
    );
    assert_eq!(
        store(200, "Cache-Control: max-age=60, s-maxage=5\r\n")
            .unwrap()
            .lifetime_ms,
        5_000
    );
    let f = store(
        200,
        "Date: Thu, 01 Jan 1970 00:16:40 GMT\r\nExpires: Thu, 01 Jan 1970 00:17:40 GMT\r\n",
    )
    .unwrap();
    assert_eq!(f.lifetime_ms, 60_000);
    assert_eq!(store(200, "Expires: 0\r\n").unwrap().lifetime_ms, 0);
    // Heuristic: a tenth of the time since the last change.
    let f = store(
        200,
        "Date: Thu, 01 Jan 1970 00:16:40 GMT\r\nLast-Modified: Thu, 01 Jan 1970 00:00:00 GMT\r\n",
    )
    .unwrap();
    assert_eq!(f.lifetime_ms, 100_000);
    // The operator's ttl wins over the origin's.
    let f = storable(
        &Asked::default(),
        &Answer {
            status: 200,
            fields: b"Cache-Control: no-cache, max-age=0\r\n",
        },
        &rule(Some(30)),
        0,
        0,
    )
    .unwrap();
    assert_eq!((f.lifetime_ms, f.no_cache), (30_000, false));
}

#[test]
fn ages() {
    // Age 10 from upstream, 2 s in flight: initial age 12 s.
    let f = storable(
        &Asked::default(),
        &Answer {
            status: 200,
            fields: b"Age: 10\r\nCache-Control: max-age=60\r\n",
        },
        &rule(None),
        1_000_000,
        1_002_000,
    )
    .unwrap();
    assert_eq!(f.initial_age_ms, 12_000);
    assert_eq!(f.age_ms(1_012_000), 22_000);
    assert!(f.is_fresh(1_040_000));
    assert!(!f.is_fresh(1_050_000));
}

#[test]
fn uses() {
    let f = Freshness {
        lifetime_ms: 10_000,
        response_time_ms: 0,
        stale_while_revalidate: 5,
        ..Default::default()
    };
    let plain = Asked::default();
    assert_eq!(usable(&f, &plain, 9_999), Use::Fresh);
    assert_eq!(usable(&f, &plain, 12_000), Use::StaleRevalidate);
    assert_eq!(usable(&f, &plain, 16_000), Use::Revalidate);
    let nc = Asked {
        pragma_no_cache: true,
        ..Default::default()
    };
    assert_eq!(usable(&f, &nc, 0), Use::Revalidate);
    let ms = Asked {
        directives: Directives::parse([&b"max-stale"[..]]),
        ..Default::default()
    };
    assert_eq!(usable(&f, &ms, 100_000), Use::Fresh);
    let mr = Freshness {
        must_revalidate: true,
        ..f
    };
    assert_eq!(usable(&mr, &ms, 100_000), Use::Revalidate);
    let ma = Asked {
        directives: Directives::parse([&b"max-age=1"[..]]),
        ..Default::default()
    };
    assert_eq!(usable(&f, &ma, 2_000), Use::Revalidate);
    let mf = Asked {
        directives: Directives::parse([&b"min-fresh=5"[..]]),
        ..Default::default()
    };
    assert_eq!(usable(&f, &mf, 6_000), Use::Revalidate);
    assert_eq!(usable(&f, &mf, 4_000), Use::Fresh);
}
