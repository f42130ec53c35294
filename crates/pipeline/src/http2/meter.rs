//! The flood meter: reads the frame headers of what a client sends (after the connection
//! preface) and counts the frames that cost the server work but carry no request: PING,
//! SETTINGS, PRIORITY, RST_STREAM (Rapid Reset, CVE-2023-44487), empty DATA frames that do
//! not end their stream, and CONTINUATION frames of one header block. Past a limit within
//! one second the connection is a flood, and is closed with GOAWAY (ENHANCE_YOUR_CALM).
//!
//! Pure: bytes in, a verdict out. The h2 crate decodes the frames themselves; this only
//! walks their 9-byte headers, so a frame split across reads is handled here too.

use std::time::{Duration, Instant};

/// The client connection preface (RFC 9113 §3.4), which precedes the first frame.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What a client may send of each kind within `WINDOW` before it is a flood.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub ping: u32,
    pub settings: u32,
    pub priority: u32,
    pub reset: u32,
    pub empty_data: u32,
    /// CONTINUATION frames in one header block (not per window).
    pub continuation: u32,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            ping: 100,
            settings: 100,
            priority: 1000,
            reset: 200,
            empty_data: 200,
            continuation: 32,
        }
    }
}

/// How long the counts of one window run.
const WINDOW: Duration = Duration::from_secs(1);

/// Why a connection was judged a flood.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flood {
    Ping,
    Settings,
    Priority,
    Reset,
    EmptyData,
    Continuation,
}

impl Flood {
    pub fn as_str(self) -> &'static str {
        match self {
            Flood::Ping => "PING flood",
            Flood::Settings => "SETTINGS flood",
            Flood::Priority => "PRIORITY flood",
            Flood::Reset => "stream reset flood (Rapid Reset)",
            Flood::EmptyData => "empty DATA flood",
            Flood::Continuation => "CONTINUATION flood",
        }
    }
}

const DATA: u8 = 0x0;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const CONTINUATION: u8 = 0x9;
const ACK: u8 = 0x1;
const END_STREAM: u8 = 0x1;

/// Counts per window, and where the reading is within the frame stream.
#[derive(Debug)]
pub struct Meter {
    limits: Limits,
    /// Preface bytes still to pass.
    preface_left: usize,
    header: [u8; 9],
    have: usize,
    /// Payload bytes of the current frame still to pass.
    payload_left: usize,
    counts: [u32; 5],
    continuation: u32,
    window_start: Option<Instant>,
}

impl Meter {
    pub fn new() -> Meter {
        Meter::with_limits(Limits::default())
    }

    pub(crate) fn with_limits(limits: Limits) -> Meter {
        Meter {
            limits,
            preface_left: PREFACE.len(),
            header: [0; 9],
            have: 0,
            payload_left: 0,
            counts: [0; 5],
            continuation: 0,
            window_start: None,
        }
    }

    /// Account for `bytes`, the next the client sent. `now` is asked when a window starts
    /// and when a count passes its limit (not per read).
    pub fn feed(&mut self, mut bytes: &[u8], now: impl Fn() -> Instant) -> Result<(), Flood> {
        let skip = self.preface_left.min(bytes.len());
        self.preface_left -= skip;
        bytes = &bytes[skip..];
        while !bytes.is_empty() {
            if self.payload_left > 0 {
                let n = self.payload_left.min(bytes.len());
                self.payload_left -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (9 - self.have).min(bytes.len());
            self.header[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have < 9 {
                break;
            }
            self.have = 0;
            let h = self.header;
            let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
            self.payload_left = len;
            self.frame(h[3], h[4], len, &now)?;
        }
        Ok(())
    }

    fn frame(
        &mut self,
        kind: u8,
        flags: u8,
        len: usize,
        now: &impl Fn() -> Instant,
    ) -> Result<(), Flood> {
        if kind == CONTINUATION {
            self.continuation += 1;
            if self.continuation > self.limits.continuation {
                return Err(Flood::Continuation);
            }
            return Ok(());
        }
        self.continuation = 0;
        let (slot, limit, flood) = match kind {
            PING if flags & ACK == 0 => (0, self.limits.ping, Flood::Ping),
            SETTINGS if flags & ACK == 0 => (1, self.limits.settings, Flood::Settings),
            PRIORITY => (2, self.limits.priority, Flood::Priority),
            RST_STREAM => (3, self.limits.reset, Flood::Reset),
            DATA if len == 0 && flags & END_STREAM == 0 => {
                (4, self.limits.empty_data, Flood::EmptyData)
            }
            _ => return Ok(()),
        };
        if self.window_start.is_none() {
            // The window starts with the first frame counted in it.
            self.window_start = Some(now());
        }
        self.counts[slot] += 1;
        if self.counts[slot] <= limit {
            return Ok(());
        }
        // Over the limit: a flood if it all came within one window; else a new window.
        let t = now();
        match self.window_start {
            Some(start) if t.saturating_duration_since(start) < WINDOW => Err(flood),
            _ => {
                self.window_start = Some(t);
                self.counts = [0; 5];
                self.counts[slot] = 1;
                Ok(())
            }
        }
    }
}

impl Default for Meter {
    fn default() -> Meter {
        Meter::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            kind,
            flags,
            0,
            0,
            0,
            1,
        ];
        f.extend_from_slice(payload);
        f
    }

    fn pings(n: usize, flags: u8) -> Vec<u8> {
        let mut all = PREFACE.to_vec();
        for _ in 0..n {
            all.extend(frame(PING, flags, &[0; 8]));
        }
        all
    }

    #[test]
    fn a_ping_flood_is_found_at_its_limit_and_not_before() {
        let t = Instant::now();
        let mut m = Meter::new();
        assert!(m.feed(&pings(100, 0), || t).is_ok());
        assert_eq!(m.feed(&frame(PING, 0, &[0; 8]), || t), Err(Flood::Ping));
        // The same spread over more than a window is not a flood.
        let mut m2 = Meter::new();
        assert!(m2.feed(&pings(100, 0), || t).is_ok());
        let later = t + Duration::from_millis(1500);
        assert!(m2
            .feed(&frame(PING, 0, &[0; 8]).repeat(100), || later)
            .is_ok());
        // Acknowledgements are not counted.
        let mut m3 = Meter::new();
        assert!(m3.feed(&pings(10_000, ACK), || t).is_ok());
    }

    #[test]
    fn counts_start_again_after_a_window() {
        let t = Instant::now();
        let mut m = Meter::new();
        assert!(m.feed(&pings(100, 0), || t).is_ok());
        // Two seconds later: a new window, 100 more allowed, the 101st of it not.
        let later = t + Duration::from_secs(2);
        let more = frame(PING, 0, &[0; 8]).repeat(100);
        assert!(m.feed(&more, || later).is_ok());
        assert!(m.feed(&more, || later).is_err());
    }

    #[test]
    fn frames_split_at_every_byte_are_read_the_same() {
        let t = Instant::now();
        let mut all = pings(0, 0);
        for _ in 0..300 {
            all.extend(frame(RST_STREAM, 0, &[0, 0, 0, 8]));
        }
        let mut m = Meter::new();
        let mut verdict = Ok(());
        for b in all.chunks(1) {
            verdict = m.feed(b, || t);
            if verdict.is_err() {
                break;
            }
        }
        assert_eq!(verdict, Err(Flood::Reset));
    }

    #[test]
    fn payloads_are_skipped_not_read_as_headers() {
        let t = Instant::now();
        let mut all = PREFACE.to_vec();
        // DATA whose payload looks like PING headers.
        let fake = frame(PING, 0, &[0; 8]).repeat(500);
        all.extend(frame(DATA, END_STREAM, &fake));
        let mut m = Meter::new();
        assert!(m.feed(&all, || t).is_ok());
        assert_eq!(m.counts, [0; 5]);
    }

    #[test]
    fn empty_data_and_continuation_floods() {
        let t = Instant::now();
        let mut m = Meter::new();
        let mut all = PREFACE.to_vec();
        all.extend(frame(DATA, 0, &[]).repeat(202));
        assert_eq!(m.feed(&all, || t), Err(Flood::EmptyData));
        // Empty DATA that ends its stream is a request, not a flood.
        let mut m = Meter::new();
        let mut all = PREFACE.to_vec();
        all.extend(frame(DATA, END_STREAM, &[]).repeat(1000));
        assert!(m.feed(&all, || t).is_ok());
        let mut m = Meter::new();
        let mut all = PREFACE.to_vec();
        all.extend(frame(0x1, 0, b"x"));
        all.extend(frame(CONTINUATION, 0, b"").repeat(33));
        assert_eq!(m.feed(&all, || t), Err(Flood::Continuation));
        let mut m = Meter::new();
        let mut all = PREFACE.to_vec();
        for _ in 0..10 {
            all.extend(frame(0x1, 0, b"x"));
            all.extend(frame(CONTINUATION, 0, b"").repeat(32));
        }
        assert!(m.feed(&all, || t).is_ok());
    }
}
