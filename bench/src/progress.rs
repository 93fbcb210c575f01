//! The progress line: step, scenario, peer and an estimate of the time left.
//!
//! Every planned step has an expected cost in seconds (its measured time plus setup); the
//! estimate scales the cost still ahead by how the finished steps compared with theirs.

use std::io::{IsTerminal, Write};
use std::time::Instant;

/// Seconds of planned cost counted as already on pace, to damp early estimates.
const SMOOTHING: f64 = 10.0;

pub struct Progress {
    costs: Vec<f64>,
    done: usize,
    started: Instant,
    tty: bool,
}

impl Progress {
    pub fn new(costs: Vec<f64>) -> Progress {
        Progress { costs, done: 0, started: Instant::now(), tty: std::io::stderr().is_terminal() }
    }

    /// Seconds left, from the expected costs of the remaining steps, scaled by how long the
    /// finished ones took against their expectation.
    pub fn left_secs(&self) -> f64 {
        let done: f64 = self.costs[..self.done].iter().sum();
        let ahead: f64 = self.costs[self.done..].iter().sum();
        // Smoothed: the first steps alone (process starts, JIT) would swing the estimate.
        let pace = (self.started.elapsed().as_secs_f64() + SMOOTHING) / (done + SMOOTHING);
        ahead * pace
    }

    /// Announces the next step.
    pub fn step(&mut self, what: &str) {
        let left = self.left_secs();
        self.done = (self.done + 1).min(self.costs.len());
        let line = format!(
            "[{}/{}, {} in, ~{} left] {what}",
            self.done,
            self.costs.len(),
            mm_ss(self.started.elapsed().as_secs_f64()),
            mm_ss(left)
        );
        let mut err = std::io::stderr();
        if self.tty {
            let _ = write!(err, "\r\x1b[2K{line}");
        } else {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
    }

    /// Ends the line (on a terminal) and says how long it all took.
    pub fn finish(&self) {
        let mut err = std::io::stderr();
        if self.tty {
            let _ = writeln!(err);
        }
        let _ = writeln!(err, "zk-bench: measured in {}", mm_ss(self.started.elapsed().as_secs_f64()));
    }
}

fn mm_ss(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_minutes_and_seconds() {
        assert_eq!(mm_ss(5.4), "5s");
        assert_eq!(mm_ss(125.0), "2m05s");
        assert_eq!(mm_ss(-1.0), "0s");
    }

    #[test]
    fn estimate_starts_from_the_plan() {
        let p = Progress::new(vec![2.0, 3.0]);
        assert!((p.left_secs() - 5.0).abs() < 0.1, "{}", p.left_secs());
    }
}
