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

/// The most holds in progress at one instant (a semaphore's holders at once). Touching intervals
/// (one ends where the next starts) do not count as overlapping.
pub fn max_depth(holds: &[Hold]) -> usize {
    let mut edges: Vec<(u64, i32)> = holds.iter().flat_map(|&(a, r)| [(a, 1), (r, -1)]).collect();
    // At equal times, ends (-1) sort before starts (+1).
    edges.sort_unstable();
    let (mut depth, mut max) = (0i32, 0i32);
    for (_, d) in edges {
        depth += d;
        max = max.max(depth);
    }
    max as usize
}

/// Acquisitions that found `max` or more holds already in progress: a semaphore admitting more
/// holders than its leases. Touching intervals do not overlap, as in [`max_depth`].
pub fn over_depth(holds: &[Hold], max: usize) -> usize {
    let mut edges: Vec<(u64, i32)> = holds.iter().flat_map(|&(a, r)| [(a, 1), (r, -1)]).collect();
    edges.sort_unstable();
    let (mut depth, mut over) = (0i64, 0);
    for (_, d) in edges {
        depth += i64::from(d);
        if d > 0 && depth > max as i64 {
            over += 1;
        }
    }
    over
}

/// Writes held beside any other hold (a reader or another writer): a read/write lock's
/// violations. `writes` are among `holds`; touching intervals do not overlap.
pub fn writer_conflicts(holds: &[Hold], writes: &[Hold]) -> usize {
    let writes: std::collections::HashSet<Hold> = writes.iter().copied().collect();
    let mut all: Vec<(u64, u64, bool)> =
        holds.iter().map(|&(a, r)| (a, r, writes.contains(&(a, r)))).collect();
    all.sort_unstable();
    // The latest end among the holds before each one, and the earliest start after it.
    let mut conflicts = 0;
    let mut latest_end = 0;
    for (i, &(a, r, write)) in all.iter().enumerate() {
        let next_start = all.get(i + 1).map_or(u64::MAX, |n| n.0);
        if write && (latest_end > a || next_start < r) {
            conflicts += 1;
        }
        latest_end = latest_end.max(r);
    }
    conflicts
}

/// The spread, (max − min) ÷ median, above which a figure did not repeat (the report marks it).
pub const UNSTEADY: f64 = 0.10;

/// The median and the range of a metric over repeats.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub count: usize,
}

impl Spread {
    /// The same spread with every value multiplied by `k` (a change of unit).
    pub fn scaled(self, k: f64) -> Spread {
        Spread { median: self.median * k, min: self.min * k, max: self.max * k, count: self.count }
    }

    /// (max − min) ÷ |median|: how far the repeats fell apart; `None` for a single value or a
    /// median of 0.
    pub fn relative(self) -> Option<f64> {
        (self.count > 1 && self.median != 0.0).then(|| (self.max - self.min) / self.median.abs())
    }

    /// Whether the repeats spread more than [`UNSTEADY`].
    pub fn unsteady(self) -> bool {
        self.relative().is_some_and(|r| r > UNSTEADY)
    }

    /// `None` for no values; NaN values (metric not measured) are left out.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut v: Vec<f64> = values.into_iter().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        let median = if v.len() % 2 == 1 { v[mid] } else { (v[mid - 1] + v[mid]) / 2.0 };
        Some(Spread { median, min: v[0], max: v[v.len() - 1], count: v.len() })
    }
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

    #[test]
    fn depth_counts_holders_at_once() {
        assert_eq!(max_depth(&[]), 0);
        assert_eq!(max_depth(&[(0, 10), (10, 20)]), 1);
        assert_eq!(max_depth(&[(0, 10), (2, 12), (4, 14), (13, 20)]), 3);
    }

    #[test]
    fn semaphore_and_rwlock_violations() {
        let holds = [(0, 10), (2, 12), (4, 14), (13, 20)];
        assert_eq!(over_depth(&holds, 3), 0);
        assert_eq!(over_depth(&holds, 2), 1);
        // Readers together are fine; a writer beside anyone is not; touching is not overlapping.
        let reads = [(0, 10), (2, 12)];
        let ok: Vec<Hold> = reads.iter().copied().chain([(12, 15)]).collect();
        assert_eq!(writer_conflicts(&ok, &[(12, 15)]), 0);
        let bad: Vec<Hold> = reads.iter().copied().chain([(11, 15), (30, 40), (35, 36)]).collect();
        assert_eq!(writer_conflicts(&bad, &[(11, 15), (30, 40)]), 2);
        assert_eq!(writer_conflicts(&reads, &[]), 0);
    }

    #[test]
    fn spread_is_median_and_range() {
        let s = Spread::of([3.0, 1.0, 2.0, f64::NAN]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.count), (2.0, 1.0, 3.0, 3));
        assert_eq!(Spread::of([4.0, 1.0]).unwrap().median, 2.5);
        assert!(Spread::of([f64::NAN]).is_none());
    }

    #[test]
    fn relative_spread_marks_figures_that_did_not_repeat() {
        let steady = Spread::of([100.0, 105.0, 96.0]).unwrap();
        assert_eq!(steady.relative(), Some(0.09));
        assert!(!steady.unsteady());
        let swinging = Spread::of([100.0, 112.0, 99.0]).unwrap();
        assert!(swinging.unsteady());
        assert_eq!(Spread::of([100.0]).unwrap().relative(), None);
        assert!(!Spread::of([100.0]).unwrap().unsteady());
        assert_eq!(Spread::of([0.0, 0.0]).unwrap().relative(), None);
    }
}
