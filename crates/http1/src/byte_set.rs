//! Sets of bytes as 256-entry tables built at compile time: a parser checks a byte with one
//! load instead of a chain of comparisons.

/// The ASCII letters and digits, and `extra`.
pub const fn alphanumeric_and(extra: &[u8]) -> [bool; 256] {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = (b as u8).is_ascii_alphanumeric();
        b += 1;
    }
    let mut i = 0;
    while i < extra.len() {
        t[extra[i] as usize] = true;
        i += 1;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letters_digits_and_the_extra_bytes_only() {
        let t = alphanumeric_and(b"-.");
        for b in 0..=255u8 {
            assert_eq!(
                t[usize::from(b)],
                b.is_ascii_alphanumeric() || b == b'-' || b == b'.'
            );
        }
    }
}
