//! What is stored about an answer besides its body: the key, the status, the field lines
//! sent with it, the request's values of the fields it varies on, and how it ages. The disk
//! tier keeps it in a file of its own (`NAME.meta`, beside `NAME.body`) in the format
//! [`Meta::encode`] writes and [`Meta::decode`] reads back, checking every length (a torn or
//! foreign file is refused, never half-read).

use bytes::Bytes;

use crate::policy::Freshness;

const MAGIC: &[u8; 4] = b"RJC1";
/// A meta record larger than this is not one of ours.
pub const MAX_META: usize = 1 << 20;

/// A `Vary` field name (lower case) and the request's value of it (`None`: absent).
pub type VaryField = (Box<[u8]>, Option<Box<[u8]>>);

/// A stored answer's description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    pub key: Box<[u8]>,
    pub status: u16,
    /// Field lines sent with it (`Name: value\r\n`), without framing, `Age`, `Date` and the
    /// fields a cache does not pass on from storage.
    pub fields: Bytes,
    /// The `Vary` field names (lower case) and the request's value of each (`None`: absent).
    pub vary: Vec<VaryField>,
    pub freshness: Freshness,
    /// Body length in bytes.
    pub length: u64,
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// The last bytes of an object file: the meta record's length (u32, little-endian) and this.
const TRAILER_MAGIC: &[u8; 4] = b"RJT1";
/// Bytes of the trailer.
pub const TRAILER: usize = 8;

/// An object file's trailer for a meta record of `len` bytes.
pub fn trailer(len: usize) -> [u8; TRAILER] {
    let mut t = [0u8; TRAILER];
    t[..4].copy_from_slice(&(len as u32).to_le_bytes());
    t[4..].copy_from_slice(TRAILER_MAGIC);
    t
}

/// The length of the meta record that ends a file of `size` bytes with `tail` as its last
/// bytes, if the trailer is one and the record fits in the file.
pub fn meta_len(size: u64, tail: &[u8; TRAILER]) -> Option<usize> {
    if &tail[4..] != TRAILER_MAGIC {
        return None;
    }
    let len = u32::from_le_bytes(tail[..4].try_into().ok()?) as usize;
    (len <= MAX_META && size >= (TRAILER + len) as u64).then_some(len)
}

impl Meta {
    /// The record and the trailer, as they follow the body in its file.
    pub fn encode_with_trailer(&self) -> Vec<u8> {
        let mut out = self.encode();
        let t = trailer(out.len());
        out.extend_from_slice(&t);
        out
    }

    /// The meta of a whole object file (`body`, record, trailer), if it is one: the record
    /// well-formed and its body length the file's.
    pub fn of_object(file: &[u8]) -> Option<Meta> {
        let tail: &[u8; TRAILER] = file
            .get(file.len().checked_sub(TRAILER)?..)?
            .try_into()
            .ok()?;
        let len = meta_len(file.len() as u64, tail)?;
        let at = file.len() - TRAILER - len;
        let m = Meta::decode(&file[at..file.len() - TRAILER])?;
        (m.length == at as u64).then_some(m)
    }

    pub fn encode(&self) -> Vec<u8> {
        let f = &self.freshness;
        let mut out = Vec::with_capacity(64 + self.key.len() + self.fields.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.status.to_le_bytes());
        out.extend_from_slice(&self.length.to_le_bytes());
        for v in [f.lifetime_ms, f.initial_age_ms, f.response_time_ms] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.push(u8::from(f.no_cache) | (u8::from(f.must_revalidate) << 1));
        out.extend_from_slice(&f.stale_while_revalidate.to_le_bytes());
        out.extend_from_slice(&f.stale_if_error.to_le_bytes());
        put_bytes(&mut out, &self.key);
        put_bytes(&mut out, &self.fields);
        out.extend_from_slice(&(self.vary.len() as u16).to_le_bytes());
        for (name, value) in &self.vary {
            put_bytes(&mut out, name);
            match value {
                Some(v) => {
                    out.push(1);
                    put_bytes(&mut out, v);
                }
                None => out.push(0),
            }
        }
        out
    }

    /// `None` unless `data` is exactly one well-formed record.
    pub fn decode(data: &[u8]) -> Option<Meta> {
        if data.len() > MAX_META {
            return None;
        }
        let mut r = Reader(data);
        if r.take(4)? != MAGIC {
            return None;
        }
        let status = r.u16()?;
        if !(200..=599).contains(&status) {
            return None;
        }
        let length = r.u64()?;
        let (lifetime_ms, initial_age_ms, response_time_ms) = (r.u64()?, r.u64()?, r.u64()?);
        let flags = r.u8()?;
        if flags > 3 {
            return None;
        }
        let (swr, sie) = (r.u32()?, r.u32()?);
        let key = r.bytes()?.into();
        let fields = r.bytes()?;
        // Field lines as the server sends them: no bare CR or LF that could split a head.
        for line in fields.split_inclusive(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r\n")?;
            if line.contains(&b'\r') || line.contains(&b'\n') || !line.contains(&b':') {
                return None;
            }
        }
        let fields = Bytes::copy_from_slice(fields);
        let n = r.u16()?;
        let mut vary = Vec::with_capacity(usize::from(n).min(64));
        for _ in 0..n {
            let name = r.bytes()?.into();
            let value = match r.u8()? {
                0 => None,
                1 => Some(r.bytes()?.into()),
                _ => return None,
            };
            vary.push((name, value));
        }
        if !r.0.is_empty() {
            return None;
        }
        Some(Meta {
            key,
            status,
            fields,
            vary,
            freshness: Freshness {
                lifetime_ms,
                initial_age_ms,
                response_time_ms,
                no_cache: flags & 1 != 0,
                must_revalidate: flags & 2 != 0,
                stale_while_revalidate: swr,
                stale_if_error: sie,
            },
            length,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Meta {
        Meta {
            key: b"http\0example.com\0/a\0".to_vec().into(),
            status: 200,
            fields: Bytes::from_static(b"Content-Type: text/plain\r\nETag: \"1\"\r\n"),
            vary: vec![
                (
                    b"accept-encoding".to_vec().into(),
                    Some(b"gzip".to_vec().into()),
                ),
                (b"x".to_vec().into(), None),
            ],
            freshness: Freshness {
                lifetime_ms: 5,
                initial_age_ms: 6,
                response_time_ms: 7,
                no_cache: true,
                must_revalidate: false,
                stale_while_revalidate: 8,
                stale_if_error: 9,
            },
            length: 12345,
        }
    }

    #[test]
    fn round_trip() {
        let m = sample();
        assert_eq!(Meta::decode(&m.encode()), Some(m));
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        let bytes = sample().encode();
        for cut in 0..bytes.len() {
            assert_eq!(Meta::decode(&bytes[..cut]), None, "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(Meta::decode(&longer), None);
    }

    #[test]
    fn a_field_line_that_could_split_a_head_is_refused() {
        let mut m = sample();
        m.fields = Bytes::from_static(b"A: b\r\nInjected\r\n");
        assert_eq!(Meta::decode(&m.encode()), None);
        m.fields = Bytes::from_static(b"A: b\rc\r\n");
        assert_eq!(Meta::decode(&m.encode()), None);
    }
}
