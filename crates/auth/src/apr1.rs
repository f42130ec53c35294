//! Apache's `$apr1$` password hash: Poul-Henning Kamp's MD5-crypt with the magic string
//! `$apr1$` in place of `$1$`, and the default of Apache's `htpasswd` (`-m`). Written here
//! because no maintained crate carries the Apache variant; it is only ever verified.

use md5::{Digest, Md5};

const MAGIC: &[u8] = b"$apr1$";
const ITOA64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The 22-character encoded hash of `password` with `salt` (at most 8 bytes are used).
pub(crate) fn hash(password: &[u8], salt: &[u8]) -> [u8; 22] {
    let salt = &salt[..salt.len().min(8)];
    let alternate = Md5::new()
        .chain_update(password)
        .chain_update(salt)
        .chain_update(password)
        .finalize();
    let mut ctx = Md5::new()
        .chain_update(password)
        .chain_update(MAGIC)
        .chain_update(salt);
    let mut left = password.len();
    while left > 0 {
        let n = left.min(16);
        ctx.update(&alternate[..n]);
        left -= n;
    }
    // One byte per bit of the length: a zero byte for a set bit, else the first byte of
    // the password (the original's quirk, kept for compatibility).
    let mut bits = password.len();
    while bits > 0 {
        if bits & 1 == 1 {
            ctx.update([0u8]);
        } else {
            ctx.update(&password[..1]);
        }
        bits >>= 1;
    }
    let mut digest = ctx.finalize();
    for round in 0..1000 {
        let mut c = Md5::new();
        if round % 2 == 1 {
            c.update(password);
        } else {
            c.update(digest);
        }
        if round % 3 != 0 {
            c.update(salt);
        }
        if round % 7 != 0 {
            c.update(password);
        }
        if round % 2 == 1 {
            c.update(digest);
        } else {
            c.update(password);
        }
        digest = c.finalize();
    }
    let d = digest;
    let mut out = [0u8; 22];
    let groups = [
        (d[0], d[6], d[12]),
        (d[1], d[7], d[13]),
        (d[2], d[8], d[14]),
        (d[3], d[9], d[15]),
        (d[4], d[10], d[5]),
    ];
    for (i, (a, b, c)) in groups.into_iter().enumerate() {
        let v = u32::from(a) << 16 | u32::from(b) << 8 | u32::from(c);
        for j in 0..4 {
            out[i * 4 + j] = ITOA64[(v >> (6 * j)) as usize & 63];
        }
    }
    let v = u32::from(d[11]);
    out[20] = ITOA64[v as usize & 63];
    out[21] = ITOA64[(v >> 6) as usize & 63];
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        // `openssl passwd -apr1 -salt xxxxxxxx password` (its manual's example).
        assert_eq!(&hash(b"password", b"xxxxxxxx"), b"dxHfLAsjHkDRmG83UXe8K0");
        // python-aprmd5's example: apr_md5_encode("foo", "mYJd83wW").
        assert_eq!(&hash(b"foo", b"mYJd83wW"), b"IO.6aK3G0d4mHxcImhPX50");
    }
}
