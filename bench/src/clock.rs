//! One clock for every peer: CLOCK_MONOTONIC, which Java's `System.nanoTime` and Python's
//! `time.monotonic_ns` also read on Linux, so handoffs across processes are comparable.

/// Nanoseconds on CLOCK_MONOTONIC.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we pass.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Resident memory of process `pid` in bytes (VmRSS).
pub fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("VmRSS:").map(str::to_string)))
        .and_then(|v| v.split_whitespace().next().and_then(|kb| kb.parse::<u64>().ok()))
        .map_or(0, |kb| kb * 1024)
}

/// User + system CPU time of this process (every thread), in nanoseconds, from `getrusage`.
pub fn self_cpu_ns() -> u64 {
    // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we pass.
    unsafe {
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
    }
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// User + system CPU time of another process (every thread), in nanoseconds, from the `utime`
/// and `stime` fields of `/proc/<pid>/stat` (clock-tick resolution, 10 ms on most systems).
/// `None` once the process is gone.
pub fn process_cpu_ns(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_cpu_ticks(&stat).map(|ticks| ticks * 1_000_000_000 / clock_ticks_per_sec())
}

/// `utime + stime` in clock ticks from a `/proc/<pid>/stat` line (fields 14 and 15; the command
/// name in parentheses may contain spaces, so fields are counted after its closing parenthesis).
pub fn parse_stat_cpu_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

pub fn clock_ticks_per_sec() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as u64
    } else {
        100
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cpu_ticks_after_the_command_name() {
        let line = "4242 (java (x) y) S 1 2 3 0 -1 4194304 100 0 0 0 250 31 0 0 20 0 40 0 123 456 789";
        assert_eq!(parse_stat_cpu_ticks(line), Some(281));
        assert_eq!(parse_stat_cpu_ticks("garbage"), None);
    }

    #[test]
    fn own_cpu_time_is_readable_both_ways() {
        let spin_until = now_ns() + 30_000_000;
        while now_ns() < spin_until {}
        assert!(self_cpu_ns() > 0);
        assert!(process_cpu_ns(std::process::id()).is_some());
    }
}
