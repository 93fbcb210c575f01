//! Percentiles, handoff latencies and the mutual-exclusion check over hold intervals.

/// One hold: when the lock was acquired and when its holder started releasing it (CLOCK_MONOTONIC ns).
pub type Hold = (u64, u64);

/// The `p`-th percentile (0–100) of `values`, nearest rank; 0 for none.
pub fn percentile(values: &mut [u64], p: f64) -> u64 {
    if values.is_empty() {
        return 0;
    }
    values.sort_unstable();
    let rank = ((p / 100.0) * values.len() as f64).ceil().max(1.0) as usize;
    values[rank.min(values.len()) - 1]
}

/// Sorts holds by acquisition and returns how many pairs overlap (two holders at once).
pub fn overlaps(holds: &mut [Hold]) -> usize {
    holds.sort_unstable();
    holds.windows(2).filter(|w| w[1].0 < w[0].1).count()
}

/// Handoff latencies: from one holder starting to release to the next holder acquiring.
/// `holds` must be sorted (see [`overlaps`]).
pub fn handoffs(holds: &[Hold]) -> Vec<u64> {
    holds.windows(2).map(|w| w[1].0.saturating_sub(w[0].1)).collect()
}

/// Full cycle times of a single contender: from one acquisition to the next.
pub fn cycles(holds: &[Hold]) -> Vec<u64> {
    holds.windows(2).map(|w| w[1].0.saturating_sub(w[0].0)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let mut v = vec![5, 1, 4, 2, 3];
        assert_eq!(percentile(&mut v, 50.0), 3);
        assert_eq!(percentile(&mut v, 99.0), 5);
        assert_eq!(percentile(&mut [], 50.0), 0);
    }

    #[test]
    fn finds_overlaps_and_handoffs() {
        let mut holds = vec![(30, 40), (0, 10), (12, 20)];
        assert_eq!(overlaps(&mut holds), 0);
        assert_eq!(handoffs(&holds), vec![2, 10]);
        let mut bad = vec![(0, 10), (5, 12)];
        assert_eq!(overlaps(&mut bad), 1);
    }
}
