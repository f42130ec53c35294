//! The SPECweb99 dynamic content module (specweb99.md §3), in-process as TUX and X15 ran
//! it. Mounted on the benchmark's `DYNAMIC_ROOT`:
//!
//! ```toml
//! [[location]]
//! path = "/specweb99"
//! module = "specweb99"
//! [location.module_config]
//! root = "/srv/specweb"            # holds file_set/
//! data_dir = "/var/lib/specweb"    # User.Personality, Custom.Ads, post.log (default: root)
//! ```
//!
//! What a request is follows from the request, as in TUX's module:
//! - `POST`: a dynamic POST (the record goes to the post log, on disk before the reply);
//! - `GET ...?command/Reset&...`, `?command/Fetch` and `?command/Finish`: the manager's
//!   housekeeping (Finish, sent after each point, is acknowledged);
//! - `GET ...?/file_set/...` with a `my_cookie` cookie: custom ad rotation (CAD);
//! - any other `GET ...?/file_set/...`: the standard dynamic GET.
//!
//! File bytes are never copied: a reply is the frame's bytes, file ranges, and for CAD the
//! 17-byte substitutions between the ranges.

mod files;
mod postlog;

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use ramjet_config::{ModuleError, MountContext};
use ramjet_specweb::frame;
use ramjet_specweb::postlog::Post;
use ramjet_specweb::request::{self, parse_post};
use ramjet_specweb::tables::{self, Ad, AdParams};
use serde::Deserialize;

use crate::api::{blocking, LaterReply, Module, ModuleRequest, ModuleWorker, Reply};
use crate::registry::{option_error, options, Registration};
use files::{Files, Object, Opened};
use postlog::PostLog;

/// How `module = "specweb99"` is found.
pub const REGISTRATION: Registration = Registration {
    name: "specweb99",
    start,
};

const USERS_FILE: &str = "User.Personality";
const ADS_FILE: &str = "Custom.Ads";
const POST_LOG: &str = "post.log";
/// A POST body is five short fields.
const MAX_POST_BODY: usize = 4096;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    root: String,
    data_dir: Option<String>,
    server_software: Option<String>,
}

/// The user and ad tables, replaced whole by Reset.
#[derive(Default)]
struct Tables {
    users: Vec<u32>,
    ads: Vec<Ad>,
}

struct SpecWeb {
    root: PathBuf,
    data: PathBuf,
    server: String,
    tables: RwLock<Arc<Tables>>,
    log: PostLog,
}

fn start(config: &toml::Table, _: &MountContext<'_>) -> Result<Arc<dyn Module>, ModuleError> {
    let o: Options = options(config)?;
    let root = PathBuf::from(&o.root);
    if !root.is_absolute() || !root.is_dir() {
        return Err(option_error(
            "root",
            format!("`{}` is not an absolute path to a directory", o.root),
        ));
    }
    let data = o.data_dir.map_or_else(|| root.clone(), PathBuf::from);
    if !data.is_absolute() || !data.is_dir() {
        return Err(option_error(
            "data_dir",
            format!(
                "`{}` is not an absolute path to a directory",
                data.display()
            ),
        ));
    }
    let log =
        PostLog::open(&data.join(POST_LOG)).map_err(|e| option_error("data_dir", e.to_string()))?;
    // Tables from an earlier Reset, if any (the manager resets before every iteration).
    let tables = match (
        std::fs::read(data.join(USERS_FILE)),
        std::fs::read(data.join(ADS_FILE)),
    ) {
        (Ok(u), Ok(a)) => Tables {
            users: tables::parse_users(&u).map_err(|e| option_error("data_dir", e))?,
            ads: tables::parse_ads(&a).map_err(|e| option_error("data_dir", e))?,
        },
        _ => Tables::default(),
    };
    Ok(Arc::new(SpecWeb {
        root,
        data,
        server: o.server_software.unwrap_or_else(|| "ramjet".into()),
        tables: RwLock::new(Arc::new(tables)),
        log,
    }))
}

impl Module for SpecWeb {
    fn worker(self: Arc<Self>) -> Box<dyn ModuleWorker> {
        Box::new(Worker {
            shared: self,
            files: Files::default(),
        })
    }
}

struct Worker {
    shared: Arc<SpecWeb>,
    files: Files,
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The user and last ad from the `my_cookie` cookie.
fn my_cookie(req: &ModuleRequest<'_>) -> Option<(u64, u32)> {
    request::my_cookie(req.cookie("my_cookie")?)
}

impl Worker {
    /// A 200 reply: the frame's head for this request, what `fill` adds, the frame's tail.
    fn frame(&self, req: &ModuleRequest<'_>, fill: impl FnOnce(&mut Reply)) -> Reply {
        let script = std::str::from_utf8(req.path()).unwrap_or("");
        let head = frame::head(
            &self.shared.server,
            &req.client().ip().to_string(),
            script,
            req.query().unwrap_or(""),
        );
        let mut reply = Reply::new(200)
            .header("Content-Type", "text/html")
            .bytes(head);
        fill(&mut reply);
        reply.bytes(Bytes::from_static(frame::TAIL))
    }

    /// The framed reply for `file`, with each ad placeholder replaced by `ad`'s target.
    fn framed(&self, req: &ModuleRequest<'_>, file: &Opened, ad: Option<u32>) -> Reply {
        self.frame(req, |reply| {
            let mut at = 0;
            if let Some(ad) = ad {
                let target = Bytes::copy_from_slice(&tables::ad_target(ad));
                for &p in &file.placeholders {
                    reply.push_file(file.file.clone(), at, p - at);
                    reply.push_bytes(target.clone());
                    at = p + target.len() as u64;
                }
            }
            reply.push_file(file.file.clone(), at, file.len - at);
        })
    }

    /// An object's open file: from this worker's cache, opened here when the kernel's
    /// caches can answer, else on the blocking pool.
    async fn file(&self, o: Object) -> Result<Arc<Opened>, Reply> {
        if let Some(f) = self.files.get(o) {
            return Ok(f);
        }
        let root = self.shared.root.clone();
        let opened = match files::open_cached(&root, o) {
            Some(done) => Some(done),
            None => blocking(move || files::open(&root, o)).await,
        };
        match opened {
            Some(Ok(f)) => {
                let f = Arc::new(f);
                self.files.put(o, f.clone());
                Ok(f)
            }
            Some(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => Err(Reply::text(
                404,
                format!("{}: not in the file set\n", o.name()),
            )),
            _ => Err(Reply::text(
                500,
                format!("{}: could not be opened\n", o.name()),
            )),
        }
    }

    /// Standard dynamic GET and CAD: the object, framed, with the ad for a CAD.
    fn get<'r>(&'r self, req: &'r ModuleRequest<'r>, o: Object) -> Result<Reply, LaterReply<'r>> {
        let cad = my_cookie(req);
        if cad.is_none() {
            if let Some(f) = self.files.get(o) {
                return Ok(self.framed(req, &f, None));
            }
        }
        Err(Box::pin(async move {
            let f = match self.file(o).await {
                Ok(f) => f,
                Err(reply) => return reply,
            };
            match cad {
                None => self.framed(req, &f, None),
                Some((user, last_ad)) => self.cad(req, &f, user, last_ad),
            }
        }))
    }

    fn cad(&self, req: &ModuleRequest<'_>, f: &Opened, user: u64, last_ad: u32) -> Reply {
        let tables = self
            .shared
            .tables
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let dem = user
            .checked_sub(10_000)
            .and_then(|i| tables.users.get(i as usize).copied());
        match dem {
            Some(dem) if !tables.ads.is_empty() => {
                let c = tables::find_ad(dem, &tables.ads, last_ad, now());
                self.framed(req, f, Some(c.ad)).header(
                    "Set-Cookie",
                    format!(
                        "found_cookie=Ad_id={}&Ad_weight={}&Expired={}",
                        c.ad,
                        c.weight,
                        u8::from(c.expired)
                    ),
                )
            }
            // TUX's answer for a user it does not know (or before the first Reset).
            _ => self
                .framed(req, f, None)
                .header("Set-Cookie", "found_cookie=Ad_id=-1&Ad_weight=0&Expired=1"),
        }
    }

    async fn post(&self, req: &ModuleRequest<'_>) -> Reply {
        let body = match req.body(MAX_POST_BODY).await {
            Ok(b) => b,
            Err(e) => return Reply::text(e.status(), "request body refused\n"),
        };
        let Some(form) = parse_post(&body) else {
            return Reply::text(400, "a POST needs urlroot, dir, class, num and client\n");
        };
        let Some((user, _)) = my_cookie(req) else {
            return Reply::text(400, "a POST needs the my_cookie cookie\n");
        };
        let f = match self.file(form.object).await {
            Ok(f) => f,
            Err(reply) => return reply,
        };
        let o = form.object;
        let filename = form.filename();
        let shared = self.shared.clone();
        let client = form.client;
        let written = blocking(move || {
            shared.log.append(|recno| Post {
                recno,
                time: now(),
                pid: std::process::id(),
                dir: o.dir,
                class: o.class,
                num: o.num,
                client,
                filename,
                user_id: user,
            })
        })
        .await;
        match written {
            Some(Ok(_)) => self
                .framed(req, &f, None)
                .header("Set-Cookie", format!("my_cookie={user}")),
            _ => Reply::text(500, "the post log could not be written\n"),
        }
    }

    async fn command(&self, req: &ModuleRequest<'_>, command: &str) -> Reply {
        let (name, params) = command.split_once('&').unwrap_or((command, ""));
        match name {
            "Reset" => {
                let (users, p) = request::parse_reset(params, now());
                let shared = self.shared.clone();
                let done = blocking(move || shared.reset(users, &p)).await;
                match done {
                    Some(Ok(())) => self.frame(req, |_| {}),
                    Some(Err(e)) => Reply::text(500, format!("Reset failed: {e}\n")),
                    None => Reply::text(500, "Reset failed\n"),
                }
            }
            "Fetch" => {
                let (file, count) = self.shared.log.snapshot();
                let head = ramjet_specweb::postlog::header(count);
                let len = count * ramjet_specweb::postlog::RECORD as u64;
                self.frame(req, |reply| {
                    reply.push_bytes(Bytes::copy_from_slice(&head));
                    reply.push_file(file, ramjet_specweb::postlog::HEADER as u64, len);
                })
            }
            // The kit's manager sends Finish after each point and requires a 2xx; nothing
            // is kept between points here that would need closing.
            "Finish" => self.frame(req, |_| {}),
            _ => Reply::text(400, format!("unknown command `{name}`\n")),
        }
    }
}

impl SpecWeb {
    /// Reset: new tables (upfgen99, cadgen99) written where the kit writes them, the post
    /// log emptied, the tables in force replaced (blocking).
    fn reset(&self, users: u32, p: &AdParams) -> std::io::Result<()> {
        let user_bytes = tables::user_personality(users);
        let ads = tables::ads(p);
        let ad_bytes = tables::custom_ads(&ads);
        for (name, bytes) in [(USERS_FILE, &user_bytes), (ADS_FILE, &ad_bytes)] {
            let tmp = self.data.join(format!(".{name}.tmp"));
            std::fs::write(&tmp, bytes)?;
            std::fs::rename(&tmp, self.data.join(name))?;
        }
        self.log.reset()?;
        let users = tables::parse_users(&user_bytes)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        *self.tables.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(Tables { users, ads });
        Ok(())
    }
}

impl ModuleWorker for Worker {
    fn handle<'r>(&'r self, req: &'r ModuleRequest<'r>) -> Result<Reply, LaterReply<'r>> {
        match req.method() {
            "POST" => Err(Box::pin(self.post(req))),
            "GET" | "HEAD" => {
                let query = req.query().unwrap_or("");
                if let Some(command) = query.strip_prefix("command/") {
                    return Err(Box::pin(self.command(req, command)));
                }
                match Object::parse(query) {
                    Some(o) => self.get(req, o),
                    None => Ok(Reply::text(
                        404,
                        "the query names no file_set/dirNNNNN/classC_F object\n",
                    )),
                }
            }
            _ => Ok(Reply::text(405, "GET, HEAD or POST\n").header("Allow", "GET, HEAD, POST")),
        }
    }

    fn tick(&self) {}
}
