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
