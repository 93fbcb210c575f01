//! Helpers shared by the harness's own tests (each test file uses some of them).
#![allow(dead_code)]

use std::time::Duration;

use zookeeper_client::Client;

/// A guard against hangs, not a speed assertion: every awaited event has a generous bound.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// `fut`, or a panic naming `what` once [`PATIENCE`] has passed.
pub async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, fut).await.unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// A client of `connect` with the given session timeout.
pub async fn connect(connect: &str, session_timeout: Duration) -> Client {
    within("connect", Client::connector().with_session_timeout(session_timeout).connect(connect))
        .await
        .expect("connect")
}

/// Whether process `pid` is alive: a reaped process has no /proc entry; a zombie shows state Z.
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.split_whitespace().nth(2).is_none_or(|st| st != "Z"))
        .unwrap_or(false)
}
