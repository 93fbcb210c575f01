//! Small helpers every layer uses: a poison-tolerant lock, a look at a future without waiting,
//! retrying across connection losses, and background cleanup that can be awaited. They import
//! nothing from the crate but errors.

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

/// Polls `fut` once, without a waker to call: its output if it is ready now. (A request of the
/// client goes out on the first poll of a future that builds it; an event already delivered is
/// taken without waiting.)
pub(crate) fn poll_now<F: std::future::Future + ?Sized>(fut: std::pin::Pin<&mut F>) -> Option<F::Output> {
    match fut.poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
        std::task::Poll::Ready(out) => Some(out),
        std::task::Poll::Pending => None,
    }
}

/// Polls `fut` once, now (a request's future sends it at its first poll), and returns what is
/// left to await: its output if it is ready already, else `fut` itself.
pub(crate) fn sent_now<T: Send + 'static>(
    mut fut: std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>> {
    match poll_now(fut.as_mut()) {
        Some(now) => Box::pin(std::future::ready(now)),
        None => fut,
    }
}
