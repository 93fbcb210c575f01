//! Small helpers every layer uses: a poison-tolerant lock, retrying across connection losses,
//! and background cleanup that can be awaited. They import nothing from the crate but errors.

mod janitor;
mod retry;

use std::sync::{Mutex, MutexGuard};

pub(crate) use self::janitor::Janitor;
pub(crate) use self::retry::on_connection_loss;

/// Locks `mutex`, going on with its data if a thread panicked while holding it: every mutex in
/// this crate guards state that stays consistent between statements (a count, an `Option`
/// taken or set whole), so a panic elsewhere never leaves it half-written.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
