//! Paired ratios: two contenders' times compared round by round, where round `i` of each ran
//! back to back (the lab alternates contenders within a round). The host's load moves every
//! contender's time by up to 2x between rounds on the test machine (BENCHMARKS.md); a
//! pair measured within milliseconds of each other shares most of that drift, so the median
//! of the rounds' ratios moves less between runs of a command than the ratio of two medians.

/// Per-round ratios of two contenders' times (round `i` of each ran back to back).
#[derive(Debug, PartialEq)]
pub struct Paired {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Rounds where the first was faster.
    pub won: usize,
    pub rounds: usize,
}

pub fn paired(a: &[f64], b: &[f64]) -> Paired {
    let r: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
    Paired {
        median: crate::median::median(&r),
        min: r.iter().copied().fold(f64::INFINITY, f64::min),
        max: r.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        won: r.iter().filter(|&&x| x < 1.0).count(),
        rounds: r.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::{paired, Paired};

    #[test]
    fn paired_ratios_take_each_round_on_its_own() {
        // The medians (2 and 2) call it a tie; round by round the first took half the
        // second's time twice and twice its time once.
        let p = paired(&[1.0, 3.0, 2.0], &[2.0, 6.0, 1.0]);
        assert_eq!(p, Paired { median: 0.5, min: 0.5, max: 2.0, won: 2, rounds: 3 });
        let p = paired(&[3.0, 1.0, 2.0], &[2.0, 2.0, 2.0]);
        assert_eq!((p.median, p.min, p.max, p.won, p.rounds), (1.0, 0.5, 1.5, 1, 3));
    }
}
