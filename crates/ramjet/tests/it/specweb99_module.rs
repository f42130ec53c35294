//! The SPECweb99 module through the real server: standard dynamic GET, CAD with the ad
//! substituted in the file's bytes, POST into the post log, Reset and Fetch, bad input.

use ramjet_specweb::fileset::{file_bytes, file_name};
use ramjet_specweb::{postlog, tables};
use ramjet_testkit::{Client, Server};

const CONFIG: &str = "workers = 2\n[[location]]\nroot = \"root\"\n[[location]]\npath = \"/specweb99\"\nmodule = \"specweb99\"\n[location.module_config]\nroot = \"{dir}/root\"\ndata_dir = \"{dir}/data\"\n";

/// A server with the few objects the tests ask for.
fn server() -> Server {
    let dir = Server::dir();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    for (d, c, n) in [(1, 1, 3), (1, 2, 8), (0, 0, 0), (4, 1, 3), (7, 3, 2)] {
        let p = dir.path().join("root").join(file_name(d, c, n));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, file_bytes(d, c, n)).unwrap();
    }
    Server::start(crate::BIN, dir, CONFIG)
}

fn frame(query: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "<html>\n<head><title>SPECweb99 Dynamic GET & POST Test</title></head>\n<body>\n\
         <p>SERVER_SOFTWARE = ramjet\n<p>REMOTE_ADDR = 127.0.0.1\n<p>SCRIPT_NAME = /specweb99\n\
         <p>QUERY_STRING = {query}\n<pre>\n"
    )
    .into_bytes();
    out.extend_from_slice(body);
    out.extend_from_slice(b"\n</pre>\n</body></html>\n");
    out
}

fn get(c: &mut Client, target: &str, cookie: Option<&str>) -> ramjet_testkit::Response {
    let cookie = cookie.map_or(String::new(), |v| format!("Cookie: my_cookie={v}\r\n"));
    c.send(format!("GET {target} HTTP/1.1\r\nHost: t\r\n{cookie}\r\n").as_bytes());
    c.response(false)
}

fn post(c: &mut Client, body: &str, user: u64) -> ramjet_testkit::Response {
    c.send(
        format!(
            "POST /specweb99 HTTP/1.1\r\nHost: t\r\nCookie: my_cookie=user_id={user}&last_ad=3\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
    c.response(false)
}

/// Fetch: the header line between `<pre>` and `</pre>`, and the records after it.
fn fetch(c: &mut Client) -> (String, Vec<postlog::Post>) {
    let r = get(c, "/specweb99?command/Fetch", None);
    assert_eq!(r.status, 200);
    let text = r.text();
    let pre = text.split("<pre>\n").nth(1).unwrap();
    let pre = pre.split("\n</pre>").next().unwrap();
    let mut lines = pre.lines();
    let count = lines.next().unwrap_or_default().to_string();
    let recs = lines
        .map(|l| postlog::parse_record(l.as_bytes()).unwrap())
        .collect();
    (count, recs)
}

const RESET: &str =
    "/specweb99?command/Reset&maxload=100&pttime=100&maxthread=100&exp=1,100&urlroot=/file_set/";

#[test]
fn standard_get_cad_post_reset_and_fetch_answer_as_specified() {
    let s = server();
    let data = s.path("data");
    let mut c = s.client();

    // Standard dynamic GET: the file framed, byte for byte, served as its length says.
    let q = "/file_set/dir00001/class1_3";
    let r = get(&mut c, &format!("/specweb99?{q}"), None);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type").as_deref(), Some("text/html"));
    assert_eq!(r.body, frame(q, &file_bytes(1, 1, 3)));
    assert!(r.header("set-cookie").is_none());

    // CAD before any Reset: TUX's answer for an unknown user, the file untouched.
    let r = get(
        &mut c,
        &format!("/specweb99?{q}"),
        Some("user_id=10001&last_ad=20"),
    );
    assert_eq!(
        r.header("set-cookie").as_deref(),
        Some("found_cookie=Ad_id=-1&Ad_weight=0&Expired=1")
    );
    assert_eq!(r.body, frame(q, &file_bytes(1, 1, 3)));

    // Reset writes the tables the kit's generators write, and empties the post log.
    let r = get(&mut c, RESET, None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.body, frame(RESET.split_once('?').unwrap().1, b""));
    let users = std::fs::read(data.join("User.Personality")).unwrap();
    assert_eq!(users, tables::user_personality(100));
    let ads_text = std::fs::read(data.join("Custom.Ads")).unwrap();
    assert_eq!(ads_text.len(), 360 * tables::AD_RECORD);
    let ads = tables::parse_ads(&ads_text).unwrap();
    let dems = tables::parse_users(&users).unwrap();

    // CAD: the ad find_ad picks, substituted in the tags (2 in a class 2 file), every
    // other byte the file's.
    for (user, last, d, class, n) in [
        (10001u64, 20u32, 1, 2, 8),
        (10099, 359, 1, 1, 3),
        (10000, 0, 0, 0, 0),
    ] {
        let q = format!("/{}", file_name(d, class, n));
        let r = get(
            &mut c,
            &format!("/specweb99?{q}"),
            Some(&format!("user_id={user}&last_ad={last}")),
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let want = tables::find_ad(dems[(user - 10000) as usize], &ads, last, now);
        assert_eq!(
            r.header("set-cookie").unwrap(),
            format!(
                "found_cookie=Ad_id={}&Ad_weight={}&Expired={}",
                want.ad,
                want.weight,
                u8::from(want.expired)
            )
        );
        let mut file = file_bytes(d, class, n);
        let target = tables::ad_target(want.ad);
        let mut replaced = 0;
        while let Some(i) = file.windows(17).position(|w| w == b"dirNNNNN/classX_Y") {
            file[i..i + 17].copy_from_slice(&target);
            replaced += 1;
        }
        assert_eq!(replaced, ramjet_specweb::fileset::tags_in_class(class));
        assert_eq!(r.body, frame(&q, &file), "class{class}_{n}");
    }
    // An expired ad is reported so: user whose search from the start of the first expired
    // range lands in it (ads 1..=24 expired by exp=1,100).
    let expired = (0..360u32)
        .find_map(|u| {
            let c = tables::find_ad(dems[u as usize % 100], &ads, 0, i64::MAX / 2);
            (c.ad <= 24).then_some((u % 100, c))
        })
        .expect("some user's first match is in the expired range");
    let r = get(
        &mut c,
        "/specweb99?/file_set/dir00001/class1_3",
        Some(&format!("user_id={}&last_ad=0", 10000 + expired.0)),
    );
    assert!(
        r.header("set-cookie").unwrap().ends_with("&Expired=1"),
        "{:?}",
        r.header("set-cookie")
    );

    // POST: fields in any order; the reply is the framed file and my_cookie.
    for (i, body) in [
        "urlroot=/file_set/&dir=00004&class=1&num=3&client=7",
        "class=1&client=2&dir=00004&num=3&urlroot=%2Ffile_set%2F",
        "num=2&class=3&dir=00007&client=9&urlroot=/file_set/",
    ]
    .iter()
    .enumerate()
    {
        let r = post(&mut c, body, 10010 + i as u64);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(
            r.header("set-cookie"),
            Some(format!("my_cookie={}", 10010 + i))
        );
        assert!(r
            .body
            .starts_with(&frame("", b"")[..frame("", b"").len() - 23]));
    }
    // Fetch: the log, framed, its header the count.
    let (count, recs) = fetch(&mut c);
    assert_eq!(count, "         3");
    assert_eq!(recs.iter().map(|p| p.recno).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(recs[2].filename, "/file_set/dir00007/class3_2");
    assert_eq!(
        (recs[2].dir, recs[2].class, recs[2].num, recs[2].client),
        (7, 3, 2, 9)
    );
    assert_eq!(recs[0].user_id, 10010);
    let log = std::fs::read(data.join("post.log")).unwrap();
    assert_eq!(log.len(), 11 + 3 * 139);

    // Reset again: the log is empty.
    assert_eq!(get(&mut c, RESET, None).status, 200);
    let r = get(&mut c, "/specweb99?command/Fetch", None);
    assert!(
        r.text().contains("<pre>\n         0\n\n</pre>"),
        "{}",
        r.text()
    );
    // The kit's manager sends Finish after each point and needs a 2xx.
    let mut c = s.client();
    assert_eq!(get(&mut c, "/specweb99?command/Finish", None).status, 200);
    assert_eq!(get(&mut c, "/specweb99?command/Bogus", None).status, 400);
}

#[test]
fn posts_from_many_connections_get_one_increasing_sequence() {
    let s = server();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let mut c = s.client();
            std::thread::spawn(move || {
                for i in 0..10 {
                    let r = post(
                        &mut c,
                        &format!(
                            "urlroot=/file_set/&dir=00004&class=1&num=3&client={}",
                            t * 100 + i
                        ),
                        10000 + t,
                    );
                    assert_eq!(r.status, 200);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut c = s.client();
    let (count, recs) = fetch(&mut c);
    assert_eq!(count, "        80");
    let recnos: Vec<u64> = recs.iter().map(|p| p.recno).collect();
    assert_eq!(recnos, (1..=80).collect::<Vec<_>>());
}

#[test]
fn bad_requests_get_a_clear_status_and_the_connection_goes_on() {
    let s = server();
    let mut c = s.client();
    for (target, status) in [
        ("/specweb99?/file_set/../../etc/passwd", 404),
        ("/specweb99?/etc/passwd", 404),
        ("/specweb99", 404),
        ("/specweb99?/file_set/dir00099/class1_1", 404),
        ("/specweb99?command/Explode", 400),
    ] {
        let r = get(&mut c, target, None);
        assert_eq!(r.status, status, "{target}: {}", r.text());
        assert!(r.keep_alive, "{target}");
    }
    let r = post(&mut c, "urlroot=/file_set/&dir=00004", 10001);
    assert_eq!(r.status, 400);
    c.send(b"POST /specweb99 HTTP/1.1\r\nHost: t\r\nContent-Length: 9\r\n\r\nclass=1&x");
    assert_eq!(c.response(false).status, 400);
    c.send(b"PUT /specweb99 HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.status, 405);
    // Still serving.
    let r = get(&mut c, "/specweb99?/file_set/dir00000/class0_0", None);
    assert_eq!(r.status, 200);
}
