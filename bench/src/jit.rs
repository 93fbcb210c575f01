//! Whether the servers' JIT compilers have settled: a ZooKeeper JVM compiles its hot code paths
//! (C1, then C2) for many seconds after it starts taking requests, and on the servers' pinned
//! core that compiling competes with the requests being measured. A cold server showed in the
//! first counted repeat: the compiler threads took ~40 % of the standalone server's core for
//! 9 s after it started, and 20–35 % of each ensemble node's for 12 s, so whichever peer ran
//! first measured fewer operations at a higher server CPU per operation.
//!
//! After a cluster's warm-up runs, the bench keeps loading it, a slice at a time, until its
//! compiler threads are quiet: see [`Settle`].

use std::path::Path;
use std::time::{Duration, Instant};

use crate::peers::{self, Peer, Target};
use crate::report::Row;

/// A slice of load between two looks at the compiler threads.
pub const SLICE: Duration = Duration::from_secs(1);
/// Settled: the compiler threads of every node together used at most this much CPU per second
/// of a slice ...
pub const QUIET_PER_SEC: Duration = Duration::from_millis(20);
/// ... in this many slices in a row.
pub const QUIET_SLICES: usize = 2;
/// At most this many slices: a server whose compiler never quiets is reported so.
pub const MAX_SLICES: usize = 30;

/// CPU time (user + system) of the JIT compiler threads (`C1 CompilerThre…`, `C2 CompilerThre…`)
/// of process `pid`, from `/proc/<pid>/task/*/stat`; `None` once the process is gone.
pub fn compiler_cpu(pid: u32) -> Option<Duration> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let ticks: u64 = tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("stat")).ok())
        .filter(|stat| is_compiler_thread(stat))
        .filter_map(|stat| crate::clock::parse_stat_cpu_ticks(&stat))
        .sum();
    Some(Duration::from_nanos(ticks * 1_000_000_000 / crate::clock::clock_ticks_per_sec()))
}

/// Whether a `/proc/<pid>/task/<tid>/stat` line is a HotSpot JIT compiler thread's (its name is
/// cut to 15 characters: "C2 CompilerThre").
fn is_compiler_thread(stat: &str) -> bool {
    let name = stat.split_once('(').and_then(|(_, rest)| rest.rsplit_once(')')).map(|(name, _)| name);
    name.is_some_and(|n| n.starts_with("C1 Compiler") || n.starts_with("C2 Compiler"))
}

/// The compiler threads' CPU summed over `pids` (`None` if any is unreadable).
pub fn cluster_compiler_cpu(pids: &[u32]) -> Option<Duration> {
    pids.iter().map(|&pid| compiler_cpu(pid)).sum()
}

/// How a cluster's settling went, for the report.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Settled {
    /// Slices of load it took (0 when the compilers were quiet at once).
    pub slices: usize,
    /// Whether the compilers went quiet within [`MAX_SLICES`].
    pub quiet: bool,
    /// The compiler threads' CPU per second in the last slice.
    pub last_per_sec: Duration,
}

/// Follows one cluster's compiler threads from slice to slice: feed it each slice's reading.
pub struct Settle {
    last: Duration,
    quiet_run: usize,
    settled: Settled,
}

impl Settle {
    /// Starts from the compiler threads' CPU now.
    pub fn new(now: Duration) -> Settle {
        Settle { last: now, quiet_run: 0, settled: Settled::default() }
    }

    /// Takes the reading after a slice of `slice` length; whether to stop loading (settled, or
    /// out of slices).
    pub fn after_slice(&mut self, now: Duration, slice: Duration) -> bool {
        let used = now.saturating_sub(self.last);
        self.last = now;
        self.settled.slices += 1;
        let per_sec = used.div_f64(slice.as_secs_f64().max(1e-3));
        self.settled.last_per_sec = per_sec;
        self.quiet_run = if per_sec <= QUIET_PER_SEC { self.quiet_run + 1 } else { 0 };
        self.settled.quiet = self.quiet_run >= QUIET_SLICES;
        self.settled.quiet || self.settled.slices >= MAX_SLICES
    }

    pub fn settled(&self) -> Settled {
        self.settled
    }
}

impl Settled {
    /// "settled after 7 s of load", or why not.
    pub fn describe(&self) -> String {
        let secs = self.slices as f64 * SLICE.as_secs_f64();
        if self.quiet {
            format!("settled after {secs:.0} s of load")
        } else {
            format!(
                "not settled after {secs:.0} s of load (compilers at {} ms/s in the last second)",
                self.last_per_sec.as_millis()
            )
        }
    }
}

/// The contenders of a slice of load: a contended mutex exercises every request the lock
/// scenarios send (creates, listings, watches, multis, deletes).
const LOAD_CONTENDERS: usize = 8;

/// Loads the cluster behind `target` (zk-recipes and `LockClient` in turn, a slice each, each
/// slice on a fresh path from `path`) until its compiler threads are quiet (see [`Settle`]).
/// Returns how that went and every slice's row, whose invariants still count.
///
/// # Errors
/// A slice that fails, or a server whose threads can't be read.
pub async fn settle(
    target: &Target<'_>,
    scratch: &Path,
    mut path: impl FnMut() -> String,
) -> Result<(Settled, Vec<Row>), String> {
    let pids = target.zk.pids();
    let read = || cluster_compiler_cpu(&pids).ok_or("a server's threads can't be read");
    let mut settle = Settle::new(read()?);
    let mut rows = Vec::new();
    for peer in [Peer::ZkRecipes, Peer::LockClient].into_iter().cycle() {
        let started = Instant::now();
        let c = peers::contend(target, peer, LOAD_CONTENDERS, SLICE.as_secs_f64(), &path(), scratch).await?;
        rows.push(crate::rows::measured("settle", peer, LOAD_CONTENDERS, 0, c, crate::stats::handoffs));
        if settle.after_slice(read()?, started.elapsed()) {
            break;
        }
    }
    Ok((settle.settled(), rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hotspot_compiler_threads_count() {
        assert!(is_compiler_thread("12 (C2 CompilerThre) S 1 2 3 0 -1 0 0 0 0 0 250 31"));
        assert!(is_compiler_thread("13 (C1 CompilerThre) S 1 2 3 0 -1 0 0 0 0 0 5 1"));
        assert!(!is_compiler_thread("14 (NIOWorkerThread) S 1 2 3 0 -1 0 0 0 0 0 5 1"));
        assert!(!is_compiler_thread("garbage"));
    }

    #[test]
    fn settles_after_quiet_slices_in_a_row_and_gives_up_at_the_cap() {
        let ms = Duration::from_millis;
        let mut s = Settle::new(ms(0));
        assert!(!s.after_slice(ms(400), SLICE), "busy");
        assert!(!s.after_slice(ms(410), SLICE), "one quiet slice is not enough");
        assert!(!s.after_slice(ms(500), SLICE), "busy again: the run starts over");
        assert!(!s.after_slice(ms(505), SLICE));
        assert!(s.after_slice(ms(510), SLICE));
        assert_eq!(s.settled(), Settled { slices: 5, quiet: true, last_per_sec: ms(5) });

        let mut busy = Settle::new(ms(0));
        let stopped =
            (1..=MAX_SLICES as u64).map(|i| busy.after_slice(ms(100 * i), SLICE)).collect::<Vec<_>>();
        assert_eq!(stopped.iter().filter(|s| **s).count(), 1, "stops once, at the cap");
        assert!(!busy.settled().quiet);
        assert!(busy.settled().describe().starts_with("not settled after 30 s"));
    }

    #[test]
    fn reads_this_process_threads_as_no_compiler() {
        // This test binary has no HotSpot compiler threads: a readable zero.
        assert_eq!(compiler_cpu(std::process::id()), Some(Duration::ZERO));
        assert_eq!(compiler_cpu(u32::MAX), None);
    }
}
