//! The default participant id: `hostname:pid`.

use std::sync::OnceLock;

/// `hostname:pid` of this process, the data our nodes carry unless the caller picks an id.
///
/// Computed once per process: every handle built without an explicit id asks for it, and reading
/// the host name (a file) on each would cost system calls on every handle.
pub fn default_participant_id() -> String {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| format!("{}:{}", host_name(), std::process::id())).clone()
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}
