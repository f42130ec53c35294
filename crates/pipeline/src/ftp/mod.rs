//! FTP on the HTTP workers: a control connection on a listener with `protocol = "ftp"`
//! is served by [`serve`] as its own task on the same event loop. The command parser and
//! the session's state are the sans-I/O `ramjet_ftp` crate; this module does their I/O:
//! replies, passive data connections (`data`), the tree as FTP sees it (`listing`, on the
//! blocking pool), and transfers through the same [`Outbox`] as HTTP bodies (`sendfile`
//! from the page cache, cold files warmed on the blocking pool, the location's send rates),
//! watching the control connection for ABOR meanwhile (`transfer`).

mod control;
mod data;
mod listing;
mod transfer;

use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use ramjet_config::{FtpOptions, Location};
use ramjet_ftp::command::{self, Refused};
use ramjet_ftp::reply::Reply;
use ramjet_ftp::session::{Action, Listing, Session};
use tokio::net::TcpStream;

use crate::content::Content;
use crate::response::Body;
use crate::worker::{Generation, HttpWorker};
use control::{Control, Line};
use data::{Data, Passive};
use listing::View;
use transfer::Sent;

/// Counts the session in `ramjet_ftp_sessions` while it is open.
struct Open(&'static ramjet_observe::stats::WorkerStats);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.ftp_sessions.sub(1);
    }
}

/// Serve one FTP control connection on `w` (`entry`: its `listen` entry; `over_limit`: the
/// client has `limits.max_connections_per_client` open already).
pub(crate) async fn serve<C: Content>(
    w: Rc<HttpWorker<C>>,
    stream: TcpStream,
    peer: SocketAddr,
    entry: usize,
    over_limit: bool,
) {
    w.stats.ftp_sessions.add(1);
    let _open = Open(w.stats);
    let mut ctl = Control::new(stream);
    let gen = w.current();
    let refusal = match gen.config.ftp_of(entry) {
        None => Some("Service not available."),
        Some(_) if over_limit => Some("Too many connections from your address."),
        Some(ftp) => {
            let location = gen.config.ftp_location(ftp);
            let denied = location
                .access
                .as_ref()
                .is_some_and(|r| !r.admits(peer.ip()));
            denied.then_some("Access denied.")
        }
    };
    if let Some(text) = refusal {
        let _ = ctl.send(&Reply::new(421, text.as_bytes()), &gen).await;
        return;
    }
    drop(gen);
    if ctl
        .send(
            &Reply::new(220, b"ramjet FTP: anonymous, read-only."),
            &w.current(),
        )
        .await
        .is_err()
    {
        return;
    }
    let mut session = Session::new();
    if let Some(ftp) = w.current().config.ftp_of(entry) {
        if ftp.active {
            session = session.with_active_mode();
        }
        if ftp.tls.is_some() {
            session = session.with_tls(ftp.tls_required);
        }
    }
    let mut s = State {
        session,
        data: None,
        peer,
        entry,
    };
    s.run(&w, &mut ctl).await;
}

/// One control connection's state beside the sans-I/O session.
struct State {
    session: Session,
    /// The next transfer's data connection, once PASV/EPSV or PORT/EPRT arranged it.
    data: Option<Data>,
    peer: SocketAddr,
    entry: usize,
}

/// A reply's text for a refused line.
fn refused_text(r: &Refused) -> &'static str {
    match r {
        Refused::TooLong => "Line too long.",
        Refused::NotText => "NUL or CR inside the line.",
        Refused::Unknown => "Command not understood.",
        Refused::Syntax(s) | Refused::Parameter(s) => s,
    }
}

impl State {
    async fn run<C: Content>(&mut self, w: &Rc<HttpWorker<C>>, ctl: &mut Control) {
        loop {
            // No configuration generation is held while the session waits idle: an old one
            // (its files, its log) is let go at a reload, not at each session's next line.
            let idle = w.current().config.ftp_of(self.entry).map(|f| f.idle);
            let line = match idle {
                Some(idle) => ctl.next_line(w, idle).await,
                None => Line::Stopping,
            };
            let gen = w.current();
            let Some(ftp) = gen.config.ftp_of(self.entry) else {
                let _ = ctl.send(&Reply::new(421, b"FTP is off now."), &gen).await;
                return;
            };
            let line = match line {
                Line::Got(line) => line,
                Line::Closed => return,
                Line::Idle => {
                    let text = b"Timeout: no command for too long.";
                    let _ = ctl.send(&Reply::new(421, text), &gen).await;
                    return;
                }
                Line::Stopping => {
                    let text = b"Service closing: the server is stopping.";
                    let _ = ctl.send(&Reply::new(421, text), &gen).await;
                    return;
                }
            };
            let cmd = match line.and_then(|l| command::parse(&l)) {
                Ok(cmd) => cmd,
                Err(r) => {
                    let reply = Reply::new(r.code(), refused_text(&r).as_bytes());
                    if ctl.send(&reply, &gen).await.is_err() {
                        return;
                    }
                    continue;
                }
            };
            let logging_in = matches!(cmd, command::Command::Pass(_));
            let (reply, action) = self.session.handle(cmd);
            if let Some(reply) = reply {
                if logging_in && reply.code() == 230 {
                    w.stats.ftp_logins.add(1);
                }
                if ctl.send(&reply, &gen).await.is_err() {
                    return;
                }
            }
            let location = gen.config.ftp_location(ftp);
            let here = Here {
                gen: &gen,
                ftp,
                location,
            };
            // Boxed: the session's future, held while it waits idle, stays the size of its
            // wait for a line, not of the largest command's work.
            if !Box::pin(self.act(w, ctl, action, here)).await {
                return;
            }
            if w.stopping.get() {
                let text = b"Service closing: the server is stopping.";
                let _ = ctl.send(&Reply::new(421, text), &gen).await;
                return;
            }
        }
    }

    /// Carry out `action`; false when the connection is to close.
    async fn act<C: Content>(
        &mut self,
        w: &Rc<HttpWorker<C>>,
        ctl: &mut Control,
        action: Action,
        here: Here<'_>,
    ) -> bool {
        let gen = here.gen;
        let reply = match action {
            Action::None => return true,
            Action::Quit => return false,
            Action::Passive { extended } => self.passive(ctl, here, extended),
            Action::StartTls => {
                let Some(acceptor) = &here.ftp.tls else {
                    return false;
                };
                return match ctl.start_tls(acceptor, gen.config.timeouts.header).await {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::debug!("ftp: {}: TLS handshake: {e}", self.peer);
                        false
                    }
                };
            }
            Action::Active { addr } => {
                self.data = None;
                if data::active_allowed(addr, self.peer.ip()) {
                    self.data = Some(Data::Active(addr));
                    Reply::new(200, b"PORT command successful.")
                } else {
                    self.session.data_used();
                    Reply::new(
                        501,
                        b"PORT must name your own address and a port from 1024.",
                    )
                }
            }
            Action::Abort => {
                self.data = None;
                self.session.data_used();
                Reply::new(225, b"No transfer to abort.")
            }
            Action::Cwd { path } => match here.stat(path.clone()).await {
                Ok(st) if st.is_dir => {
                    let text = format!("Directory changed to {}.", String::from_utf8_lossy(&path));
                    self.session.entered(path);
                    Reply::new(250, text.as_bytes())
                }
                Ok(_) => Reply::new(550, b"Not a directory."),
                Err(text) => Reply::new(550, text.as_bytes()),
            },
            Action::Size { path } => match here.stat(path).await {
                Ok(st) if st.is_file => Reply::new(213, st.size.to_string().as_bytes()),
                Ok(_) => Reply::new(550, b"Not a plain file."),
                Err(text) => Reply::new(550, text.as_bytes()),
            },
            Action::Mdtm { path } => match here.stat(path).await {
                Ok(st) if st.is_file => {
                    let t = listing::unix(st.mtime);
                    Reply::new(213, listing::stamp(t).as_bytes())
                }
                Ok(_) => Reply::new(550, b"Not a plain file."),
                Err(text) => Reply::new(550, text.as_bytes()),
            },
            Action::Facts {
                path,
                form: Listing::Machine,
            } => match here.stat(path.clone()).await {
                Ok(st) => facts_reply(
                    &path,
                    &[listing::Entry::of(path.clone(), &st)],
                    Listing::Machine,
                ),
                Err(text) => Reply::new(550, text.as_bytes()),
            },
            Action::Facts { path, form } => match here.entries(path.clone()).await {
                Ok(entries) => facts_reply(&path, &entries, form),
                Err(text) => Reply::new(550, text.as_bytes()),
            },
            Action::Retrieve { path, offset } => {
                return self.retrieve(w, ctl, here, path, offset).await;
            }
            Action::List { path, form } => return self.list(w, ctl, here, path, form).await,
        };
        ctl.send(&reply, gen).await.is_ok()
    }

    /// PASV/EPSV: a new listener (any earlier one closed), announced by 227 or 229.
    fn passive(&mut self, ctl: &Control, here: Here<'_>, extended: bool) -> Reply {
        self.data = None;
        let local = match ctl.local_ip() {
            Ok(ip) => ip,
            Err(_) => return self.no_passive(b"Cannot open a data port."),
        };
        let announced = match (extended, local) {
            (false, IpAddr::V4(v4)) => Some(here.ftp.passive_address.unwrap_or(v4)),
            (false, IpAddr::V6(_)) => {
                return self.no_passive(b"PASV is IPv4 only: use EPSV.");
            }
            (true, _) => None,
        };
        let opened = match Passive::open(local, here.ftp.passive_ports) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("ftp: no passive port: {e}");
                return self.no_passive(b"Cannot open a data port.");
            }
        };
        let port = opened.port();
        self.data = Some(Data::Passive(opened));
        match announced {
            None => Reply::new(
                229,
                format!("Entering Extended Passive Mode (|||{port}|).").as_bytes(),
            ),
            Some(v4) => {
                let [a, b, c, d] = v4.octets();
                let text = format!(
                    "Entering Passive Mode ({a},{b},{c},{d},{},{}).",
                    port >> 8,
                    port & 0xff
                );
                Reply::new(227, text.as_bytes())
            }
        }
    }

    fn no_passive(&mut self, text: &[u8]) -> Reply {
        self.session.data_used();
        Reply::new(425, text)
    }

    /// The data connection's plan for a transfer (the session asked for one), or the 425
    /// sent.
    async fn take_data(&mut self, ctl: &mut Control, gen: &Generation) -> Option<Data> {
        self.session.data_used();
        let p = self.data.take();
        if p.is_none() {
            let _ = ctl
                .send(&Reply::new(425, b"Use PASV or EPSV first."), gen)
                .await;
        }
        p
    }

    /// RETR: the file from `offset` over the data connection, by sendfile.
    async fn retrieve<C: Content>(
        &mut self,
        w: &Rc<HttpWorker<C>>,
        ctl: &mut Control,
        here: Here<'_>,
        path: Vec<u8>,
        offset: u64,
    ) -> bool {
        let gen = here.gen;
        let (plan, line, started) = match self.begin(w, ctl, here, b"RETR ", &path).await {
            Ok(begun) => begun,
            Err(open) => return open,
        };
        let opened = here.open(path.clone()).await;
        let (file, stat) = match opened {
            Ok((file, stat)) if stat.is_file => (file, stat),
            Ok(_) => return self.refuse(w, ctl, gen, &line, b"Not a plain file.").await,
            Err(text) => return self.refuse(w, ctl, gen, &line, text.as_bytes()).await,
        };
        let len = stat.size.saturating_sub(offset);
        let name = path.rsplit(|&b| b == b'/').next().unwrap_or(&path);
        let mut text = b"Opening BINARY mode data connection for ".to_vec();
        text.extend_from_slice(name);
        text.extend_from_slice(format!(" ({len} bytes).").as_bytes());
        if ctl.send(&Reply::new(150, &text), gen).await.is_err() {
            return false;
        }
        let body = Body::File {
            file: Arc::new(file),
            offset: offset.min(stat.size),
            len,
        };
        self.deliver(w, ctl, here, plan, body, (&line, started), Some(len))
            .await
    }

    /// LIST, NLST, MLSD: the listing over the data connection.
    async fn list<C: Content>(
        &mut self,
        w: &Rc<HttpWorker<C>>,
        ctl: &mut Control,
        here: Here<'_>,
        path: Vec<u8>,
        form: Listing,
    ) -> bool {
        let gen = here.gen;
        let verb: &[u8] = match form {
            Listing::Long { .. } => b"LIST ",
            Listing::Names { .. } => b"NLST ",
            Listing::Machine => b"MLSD ",
        };
        let (plan, line, started) = match self.begin(w, ctl, here, verb, &path).await {
            Ok(begun) => begun,
            Err(open) => return open,
        };
        let entries = match here.entries(path).await {
            Ok(e) => e,
            Err(text) => return self.refuse(w, ctl, gen, &line, text.as_bytes()).await,
        };
        let now = listing::unix(std::time::SystemTime::now());
        let bytes = listing::render(&entries, form, now);
        let opening = b"Opening ASCII mode data connection for the listing.";
        if ctl.send(&Reply::new(150, opening), gen).await.is_err() {
            return false;
        }
        let body = if bytes.is_empty() {
            Body::Empty
        } else {
            Body::Bytes(Bytes::from(bytes))
        };
        self.deliver(w, ctl, here, plan, body, (&line, started), None)
            .await
    }

    /// Send a transfer's body and give its last reply (false when the control connection is
    /// gone); `file`: the length of a file (a listing otherwise), for the counters and the
    /// status page's downloads.
    #[allow(clippy::too_many_arguments)]
    async fn deliver<C: Content>(
        &mut self,
        w: &Rc<HttpWorker<C>>,
        ctl: &mut Control,
        here: Here<'_>,
        data: Data,
        body: Body,
        (line, started): (&[u8], std::time::Instant),
        file: Option<u64>,
    ) -> bool {
        let download = file.map(|len| (line, len));
        let sent = self.send_data(w, ctl, here, data, body, download).await;
        if matches!(sent, Sent::Done(_)) {
            match file {
                Some(_) => w.stats.ftp_files.add(1),
                None => w.stats.ftp_listings.add(1),
            }
        }
        self.finish(w, ctl, here.gen, line, sent, started).await
    }

    /// The start of a transfer: its data connection's plan (else 425 is sent), its log line (the
    /// verb and path) and start time, after the location's request rate (450 sent and
    /// logged past it). `Err(open)` when the transfer ends there.
    async fn begin<C: Content>(
        &mut self,
        w: &Rc<HttpWorker<C>>,
        ctl: &mut Control,
        here: Here<'_>,
        verb: &[u8],
        path: &[u8],
    ) -> Result<(Data, Vec<u8>, std::time::Instant), bool> {
        let plan = self.take_data(ctl, here.gen).await.ok_or(true)?;
        let started = std::time::Instant::now();
        let mut line = verb.to_vec();
        line.extend_from_slice(path);
        if let Some(reply) = self.over_rate(here) {
            record(w, self.peer.ip(), &line, reply.code(), 0, started);
            return Err(ctl.send(&reply, here.gen).await.is_ok());
        }
        Ok((plan, line, started))
    }

    /// The location's request rate, counted per transfer: `Some(450)` when over it.
    fn over_rate(&self, here: Here<'_>) -> Option<Reply> {
        let (_, _, rate) = here.location.shaping.as_ref()?.requests.as_ref()?;
        match rate.check(self.peer.ip(), std::time::Instant::now()) {
            ramjet_shaping::Verdict::Admit => None,
            ramjet_shaping::Verdict::Refuse(wait) => {
                let secs = wait.as_secs().max(1);
                let text = format!("Too many requests: try again in {secs} s.");
                Some(Reply::new(450, text.as_bytes()))
            }
        }
    }

    /// 550 for a transfer refused before its data connection (logged).
    async fn refuse<C: Content>(
        &mut self,
        w: &Rc<HttpWorker<C>>,
        ctl: &mut Control,
        gen: &Generation,
        line: &[u8],
        text: &[u8],
    ) -> bool {
        record(w, self.peer.ip(), line, 550, 0, std::time::Instant::now());
        ctl.send(&Reply::new(550, text), gen).await.is_ok()
    }

    /// Take the data connection and send `body` on it, watching the control connection.
    /// `download`: the request line and length of a file, listed on the status page when
    /// large.
    async fn send_data<C: Content>(
        &mut self,
        w: &Rc<HttpWorker<C>>,
        ctl: &mut Control,
        here: Here<'_>,
        plan: Data,
        body: Body,
        download: Option<(&[u8], u64)>,
    ) -> Sent {
        let local = match ctl.local_ip() {
            Ok(ip) => ip,
            Err(e) => return Sent::NoConnection(e),
        };
        let opened = plan.open(self.peer.ip(), local, here.ftp.data, w.stats);
        let data = match opened.await {
            Ok(s) => s,
            Err(e) => return Sent::NoConnection(e),
        };
        let data = match (&here.ftp.tls, self.session.data_protected()) {
            (Some(acceptor), true) => match data::secure(data, acceptor, here.ftp.data).await {
                Ok(tls) => tls,
                Err(e) => return Sent::NoConnection(e),
            },
            _ => crate::transport::Transport::Plain(data),
        };
        let job = transfer::Job {
            peer: self.peer,
            location: here.location,
            config: &here.gen.config,
            generation: w.generation.get(),
            timeout: here.ftp.data,
            download,
        };
        transfer::send(w, ctl, data, body, job).await
    }

    /// The transfer's last reply, its log line and counters; false when the control
    /// connection is gone.
    async fn finish<C: Content>(
        &mut self,
        w: &Rc<HttpWorker<C>>,
        ctl: &mut Control,
        gen: &Generation,
        line: &[u8],
        sent: Sent,
        started: std::time::Instant,
    ) -> bool {
        let (replies, code, bytes, open): (&[Said], u16, u64, bool) = match &sent {
            Sent::Done(n) => (&[(226, b"Transfer complete.")], 226, *n, true),
            Sent::Aborted(n) => (
                &[
                    (426, b"Transfer aborted; data connection closed."),
                    (226, b"Abort successful."),
                ],
                426,
                *n,
                true,
            ),
            Sent::Failed(n, _) => (
                &[(426, b"Data connection lost; transfer aborted.")],
                426,
                *n,
                true,
            ),
            Sent::ControlClosed(n) => (&[], 426, *n, false),
            Sent::NoConnection(_) => (&[(425, b"Cannot open data connection.")], 425, 0, true),
        };
        if let Sent::Failed(_, e) | Sent::NoConnection(e) = &sent {
            tracing::debug!(
                "ftp: {} from {}: {e}",
                String::from_utf8_lossy(line),
                self.peer
            );
        }
        w.stats.ftp_bytes.add(bytes);
        w.stats.body_bytes.add(bytes);
        record(w, self.peer.ip(), line, code, bytes, started);
        for (code, text) in replies {
            if ctl.send(&Reply::new(*code, text), gen).await.is_err() {
                return false;
            }
        }
        open
    }
}

/// A reply's code and text.
type Said = (u16, &'static [u8]);

/// The configuration a command runs under.
#[derive(Clone, Copy)]
struct Here<'a> {
    gen: &'a Arc<Generation>,
    ftp: &'a FtpOptions,
    location: &'a Location,
}

impl Here<'_> {
    fn view(&self) -> Option<(Arc<std::fs::File>, View)> {
        let s = self.location.statics.as_ref()?;
        Some((
            s.root.clone(),
            View {
                symlinks: s.symlinks,
                dotfiles: s.autoindex_dotfiles,
            },
        ))
    }

    /// `look(root, path, view)` on the blocking pool; the reply text when it fails.
    async fn on_pool<T: Send + 'static>(
        &self,
        path: Vec<u8>,
        look: fn(&std::fs::File, &[u8], View) -> std::io::Result<T>,
    ) -> Result<T, &'static str> {
        let (root, view) = self.view().ok_or("No such file or directory.")?;
        let job = move || look(&root, &path, view).map_err(|e| listing::refusal(&e));
        ramjet_observe::stats::blocking(job)
            .await
            .unwrap_or(Err("Server busy."))
    }

    /// `path` opened under the location's policy.
    async fn open(
        &self,
        path: Vec<u8>,
    ) -> Result<(std::fs::File, ramjet_runtime::sys::FileStat), &'static str> {
        self.on_pool(path, listing::open).await
    }

    async fn stat(&self, path: Vec<u8>) -> Result<ramjet_runtime::sys::FileStat, &'static str> {
        self.open(path).await.map(|(_, st)| st)
    }

    /// What a listing of `path` shows.
    async fn entries(&self, path: Vec<u8>) -> Result<Vec<listing::Entry>, &'static str> {
        self.on_pool(path, listing::read).await
    }
}

/// MLST (`250-Listing`, the facts, `250 End.`) or STAT of a path (`213-Status`, its
/// listing, `213 End.`): inner lines start with a space, never with a code.
fn facts_reply(path: &[u8], entries: &[listing::Entry], form: Listing) -> Reply {
    let now = listing::unix(std::time::SystemTime::now());
    let (code, mut first) = match form {
        Listing::Machine => (250, b"Listing ".to_vec()),
        _ => (213, b"Status of ".to_vec()),
    };
    first.extend_from_slice(path);
    let text = listing::render(entries, form, now);
    let inner: Vec<&[u8]> = text
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .collect();
    Reply::framed(code, &first, &inner, b"End.")
}

/// One access-log line for a transfer: the command and path as the request line, the final
/// reply code as the status.
fn record<C: Content>(
    w: &HttpWorker<C>,
    ip: IpAddr,
    line: &[u8],
    code: u16,
    bytes: u64,
    started: std::time::Instant,
) {
    let unix_secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let entry = ramjet_observe::Entry {
        remote: ip,
        unix_secs,
        request_line: line,
        host: None,
        status: code,
        body_bytes: bytes,
        referer: None,
        user_agent: None,
        micros: started.elapsed().as_micros() as u64,
        upstream: None,
    };
    w.log.borrow_mut().record(&entry);
}
