//! `--min-hold`: after the command ends (or `hold`'s stdin closes), keep the lock until the
//! minimum has passed since the acquisition, as ShedLock's lockAtLeastFor. Not a safety
//! property: a loss, a revocation or a signal ends it at once.

use std::time::Duration;

use tokio::time::Instant;
use zk_recipes::{LockGuard, LockStatus};

use crate::child::Stops;
use crate::progress::Progress;

/// How the minimum hold ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Kept {
    /// It passed (or there was none left): release now.
    Passed,
    /// The lock was lost meanwhile (under the lock's loss policy).
    Lost,
    /// `zklock revoke` asked us to release.
    Revoked,
    /// SIGINT or SIGTERM.
    Signalled,
}

/// Holds `guard` until `until` (the acquisition plus `--min-hold`), unless it is lost, revoked
/// or a signal comes first.
pub async fn keep(
    guard: &LockGuard,
    until: Instant,
    stops: &mut Stops,
    progress: Progress,
    path: &str,
) -> Kept {
    let left = until.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Kept::Passed;
    }
    progress.note(&format!(
        "zklock: keeping {path} for --min-hold: {} more (zklock revoke {path} releases it now)",
        humantime::format_duration(Duration::from_millis(left.as_millis() as u64))
    ));
    let mut status = guard.status();
    let revoked = status.wait_for(|s| *s == LockStatus::RevocationRequested);
    tokio::select! {
        () = tokio::time::sleep_until(until) => Kept::Passed,
        () = guard.lost() => Kept::Lost,
        _ = revoked => Kept::Revoked,
        _ = stops.next() => Kept::Signalled,
    }
}
