//! SPEC's random number generator (`laddis_c_rnd.c`: Park–Miller "minimal standard",
//! computed with Schrage's method) and its Zipf draw, as the kit's client uses them.

const A: i32 = 16807;
const M: i32 = 2_147_483_647; // 2^31 - 1
const Q: i32 = 127_773; // M / A
const R: i32 = 2836; // M % A

/// One generator's state (`RandomState`). A seed of 0 would stay 0, so it is taken as 1.
#[derive(Debug, Clone)]
pub struct SpecRandom {
    val: i32,
}

impl SpecRandom {
    /// `Spec_srandom`: the client seeds load generator `i` with `2331 + 256*i`.
    pub fn new(seed: i32) -> SpecRandom {
        let val = seed.rem_euclid(M);
        SpecRandom {
            val: if val == 0 { 1 } else { val },
        }
    }

    /// `Spec_nrandom`: the next value, in 1..2^31-1.
    pub fn next_int(&mut self) -> i32 {
        let hi = self.val / Q;
        let lo = self.val % Q;
        let test = A * lo - R * hi;
        self.val = if test > 0 { test } else { test + M };
        self.val
    }

    /// `Spec_random`: the next value as a fraction in (0, 1). The kit divides in single
    /// precision (`(float)val / M`), and so does this, so draws near a table boundary land
    /// where the kit's do.
    pub fn next_f64(&mut self) -> f64 {
        let v = self.next_int();
        f64::from(v as f32 / M as f32)
    }

    /// A value in `0..n` (`Spec_nrandom() % n`, as the deck shuffle draws).
    pub fn below(&mut self, n: u32) -> u32 {
        (self.next_int() as u32) % n.max(1)
    }
}

/// A Zipf table (`spec_zipf_setup`): `draw` returns 0 (the most popular) to `size - 1`.
#[derive(Debug, Clone)]
pub struct Zipf {
    /// `table[i] = 1 - cum_i / sum`, descending from `table[0] = 1` to `table[size] = 0`.
    table: Vec<f64>,
}

impl Zipf {
    /// The table for ranks 1..=size with exponent `z` (SPECweb99 uses 1).
    pub fn new(size: usize, z: f64) -> Zipf {
        let size = size.max(1);
        let mut table = vec![0.0; size + 1];
        let mut sum = 0.0;
        for (i, t) in table.iter_mut().enumerate().skip(1) {
            sum += (1.0 / i as f64).powf(z);
            *t = sum;
        }
        table[size] = 0.0;
        table[0] = 0.0;
        for t in table.iter_mut().take(size) {
            *t = 1.0 - *t / sum;
        }
        Zipf { table }
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.table.len() - 1
    }

    /// `spec_zipf`: one draw with `rng`.
    pub fn draw(&self, rng: &mut SpecRandom) -> usize {
        loop {
            let r = rng.next_f64();
            let mut i = 0;
            while i < self.table.len() && r < self.table[i] {
                i += 1;
            }
            // The kit redraws rather than return past the end (NO_ZIPF_SPIKE).
            if i <= self.size() {
                return i.saturating_sub(1);
            }
        }
    }

    /// The probability of result `k`.
    pub fn probability(&self, k: usize) -> f64 {
        self.table[k] - self.table[k + 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn park_miller_matches_the_published_check_value() {
        // Park & Miller (1988): from seed 1, the 10,000th value is 1,043,618,065.
        let mut r = SpecRandom::new(1);
        let mut v = 0;
        for _ in 0..10_000 {
            v = r.next_int();
        }
        assert_eq!(v, 1_043_618_065);
    }

    #[test]
    fn first_values_from_the_kits_client_seed() {
        let mut r = SpecRandom::new(2331);
        assert_eq!(r.next_int(), 2331 * 16807);
        assert_eq!(
            r.next_int(),
            ((2331i64 * 16807 * 16807) % 2_147_483_647) as i32
        );
    }

    #[test]
    fn zipf_over_nine_files_gives_the_specs_per_rank_shares() {
        let z = Zipf::new(9, 1.0);
        // 1/k over H(9) = 2.828968...
        let h: f64 = (1..=9).map(|k| 1.0 / k as f64).sum();
        for k in 0..9 {
            assert!((z.probability(k) - 1.0 / ((k + 1) as f64 * h)).abs() < 1e-12);
        }
        assert!((z.probability(0) - 0.3535).abs() < 1e-4);
    }

    #[test]
    fn zipf_draws_follow_the_table() {
        let z = Zipf::new(9, 1.0);
        let mut rng = SpecRandom::new(2);
        let mut counts = [0u32; 9];
        for _ in 0..90_000 {
            counts[z.draw(&mut rng)] += 1;
        }
        for (k, &c) in counts.iter().enumerate() {
            let share = f64::from(c) / 90_000.0;
            assert!((share - z.probability(k)).abs() < 0.01, "rank {k}: {share}");
        }
    }

    #[test]
    fn a_one_rank_table_always_draws_zero() {
        let z = Zipf::new(1, 1.0);
        let mut rng = SpecRandom::new(7);
        assert!((0..100).all(|_| z.draw(&mut rng) == 0));
    }
}
