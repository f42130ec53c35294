//! The hand-off message format, version 1 (all integers big-endian):
//!
//! ```text
//! message := "RJH1" count:u16 reserved:u16 record{count}
//! record  := id:u64 listener:u16 client:addr local:addr prefix_len:u32 prefix:u8{prefix_len}
//! addr    := family:u8 (4 or 6) ip:u8{16} (IPv4 in the first 4) port:u16
//! ```
//!
//! The message's `SCM_RIGHTS` carries exactly `count` descriptors, record i's connection
//! being descriptor i. Reserved and unused bytes are zero. A receiver refuses a message
//! whose magic, counts, lengths or padding do not add up, and closes every descriptor that
//! came with it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Magic and version.
pub const MAGIC: &[u8; 4] = b"RJH1";
/// Largest message: a sender packs records up to this, a receiver reads this much.
pub const MAX_MESSAGE: usize = 128 * 1024;
/// Most connections (descriptors) in one message (the kernel allows 253).
pub const MAX_BATCH: usize = 64;
pub(crate) const HEADER: usize = 8;
const ADDR: usize = 1 + 16 + 2;
/// Bytes of a record besides its prefix.
pub const RECORD_FIXED: usize = 8 + 2 + ADDR + ADDR + 4;

/// One handed-off connection's description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Chosen by the sender, echoed in logs on both sides.
    pub id: u64,
    /// Which of the sender's listeners the client connected to.
    pub listener: u16,
    pub client: SocketAddr,
    /// The address the client connected to.
    pub local: SocketAddr,
    /// Bytes the sender already read from the connection, to be processed first.
    pub prefix: Vec<u8>,
}

impl Record {
    /// Bytes this record takes in a message.
    pub fn encoded_len(&self) -> usize {
        RECORD_FIXED + self.prefix.len()
    }
}

/// Why a message was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// Not "RJH1": another protocol or version.
    Magic,
    /// Shorter than its counts and lengths say.
    Truncated,
    /// Bytes after the last record.
    Trailing,
    /// An address family other than 4 or 6.
    Family(u8),
    /// More records than [`MAX_BATCH`].
    TooMany(usize),
    /// Non-zero bytes where the format has zeros (the reserved field, the unused 12 bytes
    /// of an IPv4 address): a message is read one way only.
    Padding,
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Magic => write!(f, "not a hand-off message (magic/version)"),
            WireError::Truncated => write!(f, "hand-off message shorter than its lengths"),
            WireError::Trailing => write!(f, "bytes after the last hand-off record"),
            WireError::Family(x) => write!(f, "address family {x} in a hand-off record"),
            WireError::TooMany(n) => write!(f, "{n} records in one hand-off message"),
            WireError::Padding => write!(f, "non-zero padding in a hand-off message"),
        }
    }
}

impl std::error::Error for WireError {}

/// Append the message for `records` to `out`. The caller keeps within [`MAX_BATCH`]
/// records and [`MAX_MESSAGE`] bytes (see [`fits`]).
pub fn encode(records: &[&Record], out: &mut Vec<u8>) {
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(records.len() as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    for r in records {
        out.extend_from_slice(&r.id.to_be_bytes());
        out.extend_from_slice(&r.listener.to_be_bytes());
        put_addr(out, r.client);
        put_addr(out, r.local);
        out.extend_from_slice(&(r.prefix.len() as u32).to_be_bytes());
        out.extend_from_slice(&r.prefix);
    }
}

/// How many of `records`, from the first, fit in one message.
pub fn fits(records: &[&Record]) -> usize {
    let mut size = HEADER;
    let mut n = 0;
    for r in records.iter().take(MAX_BATCH) {
        size += r.encoded_len();
        if size > MAX_MESSAGE {
            break;
        }
        n += 1;
    }
    n
}

fn put_addr(out: &mut Vec<u8>, a: SocketAddr) {
    let mut ip = [0u8; 16];
    let family = match a.ip() {
        IpAddr::V4(v4) => {
            ip[..4].copy_from_slice(&v4.octets());
            4
        }
        IpAddr::V6(v6) => {
            ip = v6.octets();
            6
        }
    };
    out.push(family);
    out.extend_from_slice(&ip);
    out.extend_from_slice(&a.port().to_be_bytes());
}

/// The records of one message.
pub fn decode(mut buf: &[u8]) -> Result<Vec<Record>, WireError> {
    if buf.len() < HEADER || &buf[..4] != MAGIC {
        return Err(WireError::Magic);
    }
    let count = usize::from(u16::from_be_bytes([buf[4], buf[5]]));
    if buf[6..8] != [0, 0] {
        return Err(WireError::Padding);
    }
    if count > MAX_BATCH {
        return Err(WireError::TooMany(count));
    }
    buf = &buf[HEADER..];
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let fixed = take(&mut buf, RECORD_FIXED)?;
        let id = u64::from_be_bytes(fixed[..8].try_into().unwrap_or_default());
        let listener = u16::from_be_bytes([fixed[8], fixed[9]]);
        let client = get_addr(&fixed[10..10 + ADDR])?;
        let local = get_addr(&fixed[10 + ADDR..10 + 2 * ADDR])?;
        let at = 10 + 2 * ADDR;
        let len = u32::from_be_bytes(fixed[at..at + 4].try_into().unwrap_or_default()) as usize;
        let prefix = take(&mut buf, len)?.to_vec();
        out.push(Record {
            id,
            listener,
            client,
            local,
            prefix,
        });
    }
    if !buf.is_empty() {
        return Err(WireError::Trailing);
    }
    Ok(out)
}

fn take<'a>(buf: &mut &'a [u8], n: usize) -> Result<&'a [u8], WireError> {
    if buf.len() < n {
        return Err(WireError::Truncated);
    }
    let (head, rest) = buf.split_at(n);
    *buf = rest;
    Ok(head)
}

fn get_addr(b: &[u8]) -> Result<SocketAddr, WireError> {
    let port = u16::from_be_bytes([b[17], b[18]]);
    let ip = match b[0] {
        4 if b[5..17].iter().any(|&x| x != 0) => return Err(WireError::Padding),
        4 => IpAddr::V4(Ipv4Addr::new(b[1], b[2], b[3], b[4])),
        6 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[1..17]);
            IpAddr::V6(Ipv6Addr::from(o))
        }
        x => return Err(WireError::Family(x)),
    };
    Ok(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u64, prefix: &[u8], v6: bool) -> Record {
        let (client, local) = if v6 {
            ("[2001:db8::7]:40000", "[::1]:8080")
        } else {
            ("192.0.2.7:40000", "127.0.0.1:8080")
        };
        Record {
            id,
            listener: id as u16,
            client: client.parse().unwrap(),
            local: local.parse().unwrap(),
            prefix: prefix.to_vec(),
        }
    }

    #[test]
    fn a_batch_round_trips_and_the_layout_is_as_documented() {
        let records = [
            rec(1, b"", false),
            rec(2, b"GET / HTTP/1.1\r\n", true),
            rec(u64::MAX, &[0; 70_000], false),
        ];
        let refs: Vec<&Record> = records.iter().collect();
        let mut out = Vec::new();
        encode(&refs, &mut out);
        assert_eq!(&out[..8], b"RJH1\0\x03\0\0");
        assert_eq!(out.len(), 8 + 3 * RECORD_FIXED + 16 + 70_000);
        // Record 1: id, listener, client 192.0.2.7:40000.
        assert_eq!(&out[8..16], &1u64.to_be_bytes());
        assert_eq!(&out[16..18], &[0, 1]);
        assert_eq!(&out[18..23], &[4, 192, 0, 2, 7]);
        assert_eq!(&out[34..37], &[0, 0x9c, 0x40]);
        assert_eq!(decode(&out).unwrap(), records);
    }

    #[test]
    fn malformed_messages_are_refused_not_misread() {
        let records = [rec(9, b"abc", false)];
        let refs: Vec<&Record> = records.iter().collect();
        let mut good = Vec::new();
        encode(&refs, &mut good);
        assert_eq!(decode(&good[..good.len() - 1]), Err(WireError::Truncated));
        let mut long = good.clone();
        long.push(0);
        assert_eq!(decode(&long), Err(WireError::Trailing));
        let mut other = good.clone();
        other[3] = b'2';
        assert_eq!(decode(&other), Err(WireError::Magic));
        let mut family = good.clone();
        family[18] = 5;
        assert_eq!(decode(&family), Err(WireError::Family(5)));
        let mut many = good.clone();
        many[4..6].copy_from_slice(&65u16.to_be_bytes());
        assert_eq!(decode(&many), Err(WireError::TooMany(65)));
        assert_eq!(decode(b""), Err(WireError::Magic));
        let mut reserved = good.clone();
        reserved[7] = 1;
        assert_eq!(decode(&reserved), Err(WireError::Padding));
        let mut pad = good.clone();
        pad[30] = 1; // inside the client address's unused IPv4 bytes
        assert_eq!(decode(&pad), Err(WireError::Padding));
        // Every cut of a valid message is refused (or, at 0 records, empty).
        for cut in 0..good.len() {
            assert!(decode(&good[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn batches_are_cut_at_the_record_and_byte_limits() {
        let small: Vec<Record> = (0..100).map(|i| rec(i, b"x", false)).collect();
        let refs: Vec<&Record> = small.iter().collect();
        assert_eq!(fits(&refs), MAX_BATCH);
        let big: Vec<Record> = (0..4).map(|i| rec(i, &[0; 50_000], false)).collect();
        let refs: Vec<&Record> = big.iter().collect();
        assert_eq!(fits(&refs), 2);
        let huge = [rec(0, &[0; MAX_MESSAGE], false)];
        assert_eq!(fits(&[&huge[0]]), 0);
    }
}
