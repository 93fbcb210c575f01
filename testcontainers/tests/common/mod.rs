//! Helpers shared by the harness's own tests.

/// Whether process `pid` is alive: a reaped process has no /proc entry; a zombie shows state Z.
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.split_whitespace().nth(2).is_none_or(|st| st != "Z"))
        .unwrap_or(false)
}
