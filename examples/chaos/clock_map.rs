//! The clocks of clock-faulted worker processes, mapped onto the run's clock.
//!
//! A worker process under libfaketime (`faults_clock.rs`) reads a `CLOCK_MONOTONIC` that runs at
//! another rate: the times it reports (a hold's start, end and safe-window deadline; a lock-set
//! operation's invocation and return) are on that faked clock and cannot be compared with the
//! other workers'. Such a process sends `CLOCK pid label mono_ns wall_ns` samples (at its start,
//! before any other line, then every 100 ms of its clock); the resource server takes its own
//! receive time of each, on the machine's true monotonic clock, as the trustworthy one. Each
//! later line of that process has its times mapped onto the run's clock before the history
//! records them: libfaketime's faked clock is `fake = t0 + (real - t0) * rate` exactly, so
//! `real = offset + fake / rate`, where `offset` is the smallest `receive - fake / rate` over
//! the samples (the least-delayed sample; each sample's delay only makes the receive later).
//! The samples also show whether the fault took effect: the faked clock's observed rate
//! against the machine's, and the wall clock's offset from ours; a clock fault that did not
//! take effect is a failure of the run (see [`ClockMap::verdicts`]).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::resource::{mono_ns, Epoch};

/// How far the observed rate may be from the configured one before the fault counts as not in
/// effect (the samples' receive delays are milliseconds over spans of seconds).
const RATE_TOLERANCE: f64 = 0.2;

/// One clock-faulted process's samples.
#[derive(Clone, Debug)]
pub struct FakedClock {
    /// `x2`, `x0.5` (the monotonic and wall clocks at that rate) or `step` (the wall clock
    /// stepped, the monotonic clock left alone).
    pub label: String,
    /// The configured rate of its monotonic clock (1 for `step`).
    pub rate: f64,
    /// The smallest `receive - fake / rate`, in ns of the machine's monotonic clock.
    offset: f64,
    /// The first and the latest sample: (its faked monotonic ns, our receive ns).
    first: (u64, u64),
    last: (u64, u64),
    /// The smallest and largest offset of its wall clock from ours, in seconds.
    pub wall: (i64, i64),
    pub samples: usize,
}

impl FakedClock {
    /// Its clock's rate as observed from here, over its samples.
    pub fn observed_rate(&self) -> Option<f64> {
        let real = self.last.1.checked_sub(self.first.1)?;
        (real >= 500_000_000).then(|| (self.last.0.saturating_sub(self.first.0)) as f64 / real as f64)
    }

    /// When its samples began and ended on the run's clock.
    pub fn span(&self, epoch: Epoch) -> (Duration, Duration) {
        (epoch.at(self.first.1), epoch.at(self.last.1))
    }

    /// A time it reported, on the machine's monotonic clock.
    fn real_ns(&self, fake: u64) -> u64 {
        (self.offset + fake as f64 / self.rate).max(0.0) as u64
    }
}

/// Every clock-faulted process of a phase, by pid.
#[derive(Clone, Debug, Default)]
pub struct ClockMap {
    pub pids: BTreeMap<u32, FakedClock>,
    /// The run's epoch (ns of the machine's monotonic clock), as [`ClockMap::translate`] saw it.
    pub epoch_ns: u64,
}

/// Our wall clock, in ns since 1970.
fn wall_ns() -> i128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i128)
}

/// The label's monotonic rate: `x2` → 2, `step` → 1.
pub fn label_rate(label: &str) -> Option<f64> {
    match label {
        "step" => Some(1.0),
        _ => label.strip_prefix('x')?.parse().ok().filter(|r: &f64| *r > 0.0),
    }
}

/// Where a line's times are (field indexes), by its first word and length: the lines of
/// `resource.rs` and `lockset.rs` that carry a worker's `mono_ns()`.
fn time_fields(parts: &[&str]) -> &'static [usize] {
    match (parts.first().copied(), parts.len()) {
        (Some("ACQ"), 8) => &[6, 7],
        (Some("BEGIN"), 7) => &[6],
        (Some("HOLD"), 10) => &[6, 7, 8],
        (Some("LSINV"), 8) => &[7],
        (Some("LSRET"), 5) => &[4],
        (Some("LSACQ"), 8) => &[5, 6, 7],
        (Some("LSEND"), 9) => &[5, 6, 7],
        // The option phases' lines (`options_check.rs`).
        (Some("QEV"), 9) => &[8],
        (Some("CONN" | "OBS"), 5) => &[4],
        (Some("ASKED"), 7) => &[5, 6],
        (Some("TOLD"), 6) => &[5],
        _ => &[],
    }
}

impl ClockMap {
    /// Each faked process's clock rate (`options_check::real` scales durations by it).
    pub fn rates(&self) -> crate::options_check::Rates {
        self.pids.iter().map(|(pid, c)| (*pid, c.rate)).collect()
    }

    /// Takes a `CLOCK` sample (`Err` with the reply), or returns the line with its times mapped
    /// onto the machine's monotonic clock when it comes from a clock-faulted process (every
    /// line with times names its pid in its third field).
    pub fn translate(&mut self, line: String, epoch: Epoch) -> Result<String, &'static str> {
        self.epoch_ns = epoch.0;
        let parts: Vec<&str> = line.split_whitespace().collect();
        if let ["CLOCK", pid, label, mono, wall] = parts[..] {
            let (Ok(pid), Some(rate), Ok(fake), Ok(wall)) =
                (pid.parse::<u32>(), label_rate(label), mono.parse::<u64>(), wall.parse::<i128>())
            else {
                return Err("ERR");
            };
            self.sample(pid, label, rate, fake, mono_ns(), ((wall - wall_ns()) / 1_000_000_000) as i64);
            return Err("OK");
        }
        let fields = time_fields(&parts);
        let Some(clock) = parts.get(2).and_then(|p| p.parse::<u32>().ok()).and_then(|p| self.pids.get(&p))
        else {
            return Ok(line);
        };
        if fields.is_empty() {
            return Ok(line);
        }
        let mapped: Vec<String> = parts
            .iter()
            .enumerate()
            .map(|(i, p)| match p.parse::<u64>() {
                Ok(fake) if fields.contains(&i) => clock.real_ns(fake).to_string(),
                _ => p.to_string(),
            })
            .collect();
        Ok(mapped.join(" "))
    }

    /// Records one sample: `fake` read by the process, `recv` our receive time, `wall` the
    /// offset of its wall clock from ours in seconds.
    pub fn sample(&mut self, pid: u32, label: &str, rate: f64, fake: u64, recv: u64, wall: i64) {
        let offset = recv as f64 - fake as f64 / rate;
        let c = self.pids.entry(pid).or_insert_with(|| FakedClock {
            label: label.to_string(),
            rate,
            offset,
            first: (fake, recv),
            last: (fake, recv),
            wall: (wall, wall),
            samples: 0,
        });
        c.offset = c.offset.min(offset);
        c.last = (fake, recv);
        c.wall = (c.wall.0.min(wall), c.wall.1.max(wall));
        c.samples += 1;
    }

    /// Per clock-faulted process: a report line, and whether the fault was seen to take effect
    /// (the rate within [`RATE_TOLERANCE`] of the configured one; for a `step`, a monotonic
    /// clock at the machine's rate and a wall clock seen both an hour ahead and an hour behind).
    pub fn verdicts(&self) -> Vec<(String, bool)> {
        self.pids
            .iter()
            .map(|(pid, c)| {
                let observed = c.observed_rate();
                let rate_ok = observed.is_some_and(|r| (r / c.rate - 1.0).abs() <= RATE_TOLERANCE);
                let ok = rate_ok && (c.label != "step" || (c.wall.1 >= 3000 && c.wall.0 <= -3000));
                let line = format!(
                    "pid {pid} {}: monotonic clock observed at {} over {} samples, wall clock {:+}..{:+} s \
                     from ours: {}",
                    c.label,
                    observed.map_or("? (too few samples)".into(), |r| format!("{r:.2}x")),
                    c.samples,
                    c.wall.0,
                    c.wall.1,
                    if ok { "in effect" } else { "NOT IN EFFECT (a failure: the fault was a no-op)" }
                );
                (line, ok)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_faked_processs_times_are_mapped_onto_the_true_clock() {
        let mut m = ClockMap::default();
        // A process at 0.5x: its clock read 1000 s when ours was 1000 s, and 1001 s at 1002 s.
        let s = 1_000_000_000u64;
        m.sample(7, "x0.5", 0.5, 1000 * s, 1000 * s, 0);
        m.sample(7, "x0.5", 0.5, 1001 * s, 1002 * s + 5_000_000, 0); // received 5 ms late
        let line =
            m.translate(format!("HOLD p1w0 7 /r X 5 {} {} {} done", 1001 * s, 1002 * s, 1003 * s), Epoch(0));
        assert_eq!(
            line.as_deref(),
            Ok(format!("HOLD p1w0 7 /r X 5 {} {} {} done", 1002 * s, 1004 * s, 1006 * s).as_str())
        );
        // Another process's lines, and lines without times, pass unchanged.
        let same = |m: &mut ClockMap, line: &str| m.translate(line.into(), Epoch(0)) == Ok(line.into());
        assert!(same(&mut m, "HOLD p0w0 8 /r X 5 1 2 3 done"));
        assert!(same(&mut m, "END p1w0 /r 5"));
        let verdicts = m.verdicts();
        assert!(verdicts[0].1, "{verdicts:?}");
        // Observed at the machine's rate: the fault was a no-op.
        let mut noop = ClockMap::default();
        noop.sample(9, "x2", 2.0, 10 * s, 10 * s, 0);
        noop.sample(9, "x2", 2.0, 13 * s, 13 * s, 0);
        assert!(!noop.verdicts()[0].1);
        // A wall step seen only forward is not the step both ways.
        let mut step = ClockMap::default();
        step.sample(3, "step", 1.0, 10 * s, 10 * s, 0);
        step.sample(3, "step", 1.0, 13 * s, 13 * s, 3600);
        assert!(!step.verdicts()[0].1);
        step.sample(3, "step", 1.0, 14 * s, 14 * s, -3600);
        assert!(step.verdicts()[0].1);
    }
}
