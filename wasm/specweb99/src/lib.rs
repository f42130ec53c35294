//! SPECweb99's dynamic content (specweb99.md §3) as a WebAssembly module: the same logic
//! as the native `specweb99` module, from the same source for what it reads and writes
//! (`crates/specweb`: the object a query names, the cookie, the POST form, the Reset
//! parameters, the frame, the tables, the ad choice, the post log's records), over the
//! module interface instead of the native API:
//!
//! ```toml
//! [[location]]
//! path = "/specweb99"
//! module = "wasm"
//! [location.module_config]
//! component = "/path/to/specweb99.wasm"
//! files = { set = "/srv/specweb" }                    # holds file_set/
//! journals = { posts = "/var/lib/specweb/posts" }     # the post log's records
//! vars = { server_software = "ramjet" }
//! ```
//!
//! - The file set's bytes never enter the module: a reply is the frame's bytes, file
//!   ranges the server sends with sendfile, and for a CAD the 17-byte substitutions.
//!   Each instance keeps each object's size and ad placeholders (found once, by the
//!   server's `files.find`: the module never reads the file).
//! - A POST's record goes to the `posts` journal, which numbers it (one sequence for every
//!   worker) and has it on disk before the reply. Fetch sends the log's header line and
//!   the journal.
//! - Reset keeps its parameters in the mount's store; each instance rebuilds the user and
//!   ad tables from them when they change (the tables are a pure function of them). They
//!   live in memory: after a restart a CAD finds none until the next Reset (the manager
//!   resets before every iteration), and answers as for an unknown user.
//! - What an instance keeps (sizes, placeholders, the ads) is cheap to make again: under a
//!   burst the server may run many instances at once and drop those it does not keep.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use ramjet_module::{
    answer, cookie, files, journal, store, var, write, Handler, Request, WholeBody,
};
use ramjet_specweb::fileset::AD_PLACEHOLDER_AT;
use ramjet_specweb::frame;
use ramjet_specweb::postlog::{self, Post};
use ramjet_specweb::request::{self, parse_post, Object, PLACEHOLDER_NEEDLE};
use ramjet_specweb::tables::{self, Ad, AdParams};

/// The granted tree that holds `file_set/`.
const TREE: &str = "set";
/// The granted journal of posts.
const POSTS: &str = "posts";
/// The store's key for the last Reset's parameters.
const RESET_KEY: &str = "reset";
/// A POST body is five short fields.
const MAX_POST_BODY: usize = 4096;
/// Objects whose size and placeholders an instance keeps; past this it starts again.
const MAX_KNOWN: usize = 8192;

const HTML: &[u8] = b"text/html";
const TEXT: &[u8] = b"text/plain; charset=utf-8";

struct SpecWeb;

/// What one file of the set is: its name in the tree, its length and its ad placeholders.
struct Known {
    name: String,
    len: u64,
    placeholders: Vec<u64>,
}

/// The tables of the last Reset, and the parameters they were made from. A user's
/// demographics follow from its number (`tables::user_demographics`), so only the count is
/// kept; the 360 ads are made once per instance and Reset.
#[derive(Default)]
struct Tables {
    made_from: Vec<u8>,
    users: u32,
    ads: Vec<Ad>,
}

thread_local! {
    static KNOWN: RefCell<HashMap<Object, std::rc::Rc<Known>>> = RefCell::new(HashMap::new());
    static TABLES: RefCell<Tables> = RefCell::new(Tables::default());
    static SERVER: String = var("server_software").unwrap_or_else(|| "ramjet".into());
    static PID: u32 = var("pid").and_then(|p| p.parse().ok()).unwrap_or(1);
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn text(status: u16, body: &str) {
    answer(status, &[("content-type", TEXT)], body.as_bytes());
}

impl Handler for SpecWeb {
    fn handle(req: Request) {
        match req.method.as_str() {
            "POST" => post(&req),
            "GET" | "HEAD" => {
                let query = req.query().unwrap_or("");
                if let Some(command) = query.strip_prefix("command/") {
                    return self::command(&req, command);
                }
                match Object::parse(query) {
                    Some(o) => get(&req, o),
                    None => text(
                        404,
                        "the query names no file_set/dirNNNNN/classC_F object\n",
                    ),
                }
            }
            _ => answer(
                405,
                &[("content-type", TEXT), ("allow", b"GET, HEAD, POST")],
                b"GET, HEAD or POST\n",
            ),
        }
    }
}

/// Begin a 200 reply and write the frame's head for this request.
fn begin(req: &Request, cookie: Option<&str>) {
    let mut fields: Vec<(&str, &[u8])> = vec![("content-type", HTML)];
    if let Some(c) = cookie {
        fields.push(("set-cookie", c.as_bytes()));
    }
    let remote = ip(&req.client);
    let script = String::from_utf8_lossy(&req.path);
    let head = SERVER.with(|s| frame::head(s, remote, &script, req.query().unwrap_or("")));
    // The head and the frame's first bytes in one call.
    answer(200, &fields, head.as_bytes());
}

/// The address of a client given as `ip:port` or `[ipv6]:port`, without its port.
fn ip(client: &str) -> &str {
    let host = client.rsplit_once(':').map_or(client, |(h, _)| h);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

fn end() {
    write(frame::TAIL);
}

/// An object's length and placeholders: known to this instance, or asked for now.
fn known(o: Object) -> Result<std::rc::Rc<Known>, (u16, String)> {
    if let Some(k) = KNOWN.with(|m| m.borrow().get(&o).cloned()) {
        return Ok(k);
    }
    let name = o.name();
    let missing = |e| match e {
        files::FileError::NotFound => (404, format!("{name}: not in the file set\n")),
        _ => (500, format!("{name}: could not be opened\n")),
    };
    let len = files::size(TREE, &name).map_err(missing)?;
    // The server searches the file for the ad tags: its bytes never enter the module.
    let placeholders = if o.has_ads() {
        files::find(TREE, &name, PLACEHOLDER_NEEDLE, 64)
            .map_err(missing)?
            .into_iter()
            .map(|at| at + AD_PLACEHOLDER_AT as u64)
            .collect()
    } else {
        Vec::new()
    };
    let k = std::rc::Rc::new(Known {
        name,
        len,
        placeholders,
    });
    KNOWN.with(|m| {
        let mut m = m.borrow_mut();
        if m.len() >= MAX_KNOWN {
            m.clear();
        }
        m.insert(o, k.clone());
    });
    Ok(k)
}

/// The framed object, each ad placeholder replaced by `ad`'s target.
fn framed(req: &Request, k: &Known, ad: Option<u32>, cookie: Option<&str>) {
    begin(req, cookie);
    let name = &k.name;
    let mut at = 0;
    if let Some(ad) = ad {
        let target = tables::ad_target(ad);
        for &p in &k.placeholders {
            let _ = files::send(TREE, name, at, Some(p - at));
            write(&target);
            at = p + target.len() as u64;
        }
    }
    let _ = files::send(TREE, name, at, Some(k.len - at));
    end();
}

fn get(req: &Request, o: Object) {
    let k = match known(o) {
        Ok(k) => k,
        Err((status, why)) => return text(status, &why),
    };
    match cookie("my_cookie").as_deref().and_then(request::my_cookie) {
        None => framed(req, &k, None, None),
        Some((user, last_ad)) => cad(req, &k, user, last_ad),
    }
}

/// The tables the last Reset made, rebuilt when its parameters changed.
fn with_tables<T>(f: impl FnOnce(&Tables) -> T) -> T {
    let params = store::get(RESET_KEY).unwrap_or_default();
    TABLES.with(|t| {
        let mut t = t.borrow_mut();
        if t.made_from != params {
            *t = make_tables(params);
        }
        f(&t)
    })
}

/// Reset's parameters as kept in the store: `users pttime maxthread exp0 exp1 now`.
fn make_tables(params: Vec<u8>) -> Tables {
    let n: Vec<i64> = std::str::from_utf8(&params)
        .unwrap_or("")
        .split(' ')
        .filter_map(|x| x.parse().ok())
        .collect();
    let [users, pttime, maxthread, e0, e1, now] = n[..] else {
        return Tables {
            made_from: params,
            ..Tables::default()
        };
    };
    let p = AdParams {
        pttime: pttime as u32,
        maxthread: maxthread as u32,
        expired: [e0 as u32, e1 as u32],
        now,
    };
    Tables {
        made_from: params,
        users: users as u32,
        ads: tables::ads(&p),
    }
}

fn cad(req: &Request, k: &Known, user: u64, last_ad: u32) {
    let choice = with_tables(|t| {
        let dem = user
            .checked_sub(10_000)
            .filter(|&i| i < u64::from(t.users))
            .map(|i| tables::user_demographics(i as u32))?;
        (!t.ads.is_empty()).then(|| tables::find_ad(dem, &t.ads, last_ad, now()))
    });
    match choice {
        Some(c) => {
            let found = format!(
                "found_cookie=Ad_id={}&Ad_weight={}&Expired={}",
                c.ad,
                c.weight,
                u8::from(c.expired)
            );
            framed(req, k, Some(c.ad), Some(&found));
        }
        // The native module's answer for a user it does not know (or before a Reset).
        None => framed(
            req,
            k,
            None,
            Some("found_cookie=Ad_id=-1&Ad_weight=0&Expired=1"),
        ),
    }
}

fn post(req: &Request) {
    let body = match ramjet_module::body(MAX_POST_BODY) {
        Ok(b) => b,
        Err(WholeBody::TooLarge) => return text(413, "request body refused\n"),
        Err(WholeBody::Failed(_)) => return text(400, "request body refused\n"),
    };
    let Some(form) = parse_post(&body) else {
        return text(400, "a POST needs urlroot, dir, class, num and client\n");
    };
    let Some((user, _)) = cookie("my_cookie").as_deref().and_then(request::my_cookie) else {
        return text(400, "a POST needs the my_cookie cookie\n");
    };
    let k = match known(form.object) {
        Ok(k) => k,
        Err((status, why)) => return text(status, &why),
    };
    let o = form.object;
    let pid = PID.with(|p| *p);
    let record = postlog::record(&Post {
        recno: 0,
        time: now(),
        pid,
        dir: o.dir,
        class: o.class,
        num: o.num,
        client: form.client,
        filename: form.filename(),
        user_id: user,
    });
    // The journal numbers the record in its first ten bytes.
    match journal::append(POSTS, &record, Some((0, 10))) {
        Ok(_) => framed(req, &k, None, Some(&format!("my_cookie={user}"))),
        Err(_) => text(500, "the post log could not be written\n"),
    }
}

fn command(req: &Request, command: &str) {
    let (name, params) = command.split_once('&').unwrap_or((command, ""));
    match name {
        "Reset" => {
            let (users, p) = request::parse_reset(params, now());
            let kept = format!(
                "{users} {} {} {} {} {}",
                p.pttime, p.maxthread, p.expired[0], p.expired[1], p.now
            );
            if !store::set(RESET_KEY, kept.as_bytes()) || journal::clear(POSTS).is_err() {
                return text(500, "Reset failed\n");
            }
            begin(req, None);
            end();
        }
        "Fetch" => {
            let Ok((count, bytes)) = journal::size(POSTS) else {
                return text(500, "the post log is not granted\n");
            };
            begin(req, None);
            write(&postlog::header(count));
            let _ = journal::send(POSTS, 0, bytes);
            end();
        }
        // Sent after each point; nothing is kept between points that needs closing.
        "Finish" => {
            begin(req, None);
            end();
        }
        _ => text(400, &format!("unknown command `{name}`\n")),
    }
}

ramjet_module::export!(SpecWeb);
