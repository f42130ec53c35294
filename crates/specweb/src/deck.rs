//! The client's request deck (specweb99.md §1.5): classes in their exact shares, files and
//! directories drawn by Zipf, the deck shuffled with the SPEC generator.

use crate::rng::{SpecRandom, Zipf};

/// Share of requests per class.
pub const CLASS_SHARES: [f64; 4] = [0.35, 0.50, 0.14, 0.01];
/// Zipf rank (0 = most popular) to file number: rank 1 is file 4.
pub const FILE_ORDER: [u32; 9] = [4, 3, 5, 2, 6, 1, 7, 8, 0];
/// Entries per deck (the port's size; the real client's is UNCONFIRMED).
pub const DECK_SIZE: usize = 1000;

/// One object to request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub dir: u32,
    pub class: u32,
    pub num: u32,
}

/// A deck of `size` entries for a file set of `dirs` directories.
pub fn build(rng: &mut SpecRandom, dirs: &Zipf, files: &Zipf, size: usize) -> Vec<Entry> {
    let mut deck = Vec::with_capacity(size);
    let mut cumulative = 0.0;
    for (class, share) in CLASS_SHARES.iter().enumerate() {
        cumulative += share;
        let end = ((cumulative * size as f64).round() as usize).min(size);
        while deck.len() < end {
            let num = FILE_ORDER[files.draw(rng)];
            let dir = dirs.draw(rng) as u32;
            deck.push(Entry {
                dir,
                class: class as u32,
                num,
            });
        }
    }
    for remaining in (2..=deck.len()).rev() {
        let j = rng.below(remaining as u32) as usize;
        deck.swap(remaining - 1, j);
    }
    deck
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deck_has_the_exact_class_shares_and_zipf_files() {
        let mut rng = SpecRandom::new(2331);
        let dirs = Zipf::new(90, 1.0);
        let files = Zipf::new(9, 1.0);
        let deck = build(&mut rng, &dirs, &files, DECK_SIZE);
        assert_eq!(deck.len(), 1000);
        let per_class: Vec<usize> = (0..4)
            .map(|c| deck.iter().filter(|e| e.class == c).count())
            .collect();
        assert_eq!(per_class, [350, 500, 140, 10]);
        // Shuffled: the classes are not in blocks.
        assert!(deck[..350].iter().any(|e| e.class != 0));
        // File 4 is the most requested, directory 0 the most requested directory.
        let mut by_file = [0; 9];
        let mut by_dir = vec![0; 90];
        for _ in 0..20 {
            for e in build(&mut rng, &dirs, &files, DECK_SIZE) {
                by_file[e.num as usize] += 1;
                by_dir[e.dir as usize] += 1;
            }
        }
        let top = (0..9).max_by_key(|&f| by_file[f]).unwrap();
        assert_eq!(top, 4);
        assert!((f64::from(by_file[4]) / 20000.0 - 0.3535).abs() < 0.02);
        assert_eq!((0..90).max_by_key(|&d| by_dir[d]).unwrap(), 0);
        assert!(by_dir.iter().all(|&n| n < by_dir[0] + 1));
    }

    #[test]
    fn the_same_seed_gives_the_same_deck() {
        let d = Zipf::new(30, 1.0);
        let f = Zipf::new(9, 1.0);
        let a = build(&mut SpecRandom::new(2587), &d, &f, 100);
        let b = build(&mut SpecRandom::new(2587), &d, &f, 100);
        assert_eq!(a, b);
        let c = build(&mut SpecRandom::new(2331), &d, &f, 100);
        assert_ne!(a, c);
    }
}
