//! Start/close bookkeeping and the leadership channel shared by the latch and the selector.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::error::{Error, Result};

enum Phase {
    Idle,
    Running { close: oneshot::Sender<()>, task: JoinHandle<()> },
    Closed,
}

/// A background election task, its leadership channel, and why it ended.
pub(crate) struct Lifecycle {
    path: String,
    phase: Mutex<Phase>,
    leadership: watch::Sender<Leadership>,
    /// `Some` once the task has ended: `Ok` when closed, the error when it failed.
    ended: watch::Sender<Option<Result<()>>>,
}

impl Lifecycle {
    pub fn new(path: &str) -> Lifecycle {
        Lifecycle {
            path: path.to_string(),
            phase: Mutex::new(Phase::Idle),
            leadership: watch::channel(Leadership::NotLeader).0,
            ended: watch::channel(None).0,
        }
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        crate::util::lock(&self.phase)
    }

    /// Spawns the election task. It gets a receiver that fires on `close`.
    pub fn start<F, Fut>(&self, run: F) -> Result<()>
    where
        F: FnOnce(oneshot::Receiver<()>) -> Fut,
        Fut: Future<Output = Result<()>> + Send + 'static,
    {
        let mut phase = self.phase();
        match *phase {
            Phase::Idle => {}
            Phase::Running { .. } => return Err(Error::AlreadyStarted { path: self.path.clone() }),
            Phase::Closed => return Err(Error::Closed { path: self.path.clone() }),
        }
        let (close, closing) = oneshot::channel();
        let ended = self.ended.clone();
        let leadership = self.leadership.clone();
        let work = run(closing);
        let task = tokio::spawn(async move {
            let outcome = work.await;
            leadership.send_replace(Leadership::NotLeader);
            if let Err(e) = &outcome {
                tracing::warn!(error = %e, "election stopped");
            }
            ended.send_replace(Some(outcome));
        });
        *phase = Phase::Running { close, task };
        Ok(())
    }

    /// Stops the task and waits for it to finish its cleanup. A second (concurrent) call waits
    /// for the first to finish too.
    pub async fn close(&self) {
        let previous = std::mem::replace(&mut *self.phase(), Phase::Closed);
        match previous {
            Phase::Running { close, task } => {
                let _ = close.send(());
                let _ = task.await;
            }
            Phase::Closed => {
                let mut ended = self.ended.subscribe();
                let _ = ended.wait_for(|e| e.is_some()).await;
                return;
            }
            Phase::Idle => {}
        }
        self.ended.send_if_modified(|e| {
            let first = e.is_none();
            if first {
                *e = Some(Ok(()));
            }
            first
        });
    }

    /// Closes in the background (on drop).
    pub fn close_in_background(&self) {
        if let Phase::Running { close, .. } = std::mem::replace(&mut *self.phase(), Phase::Closed) {
            let _ = close.send(());
        }
    }

    pub fn set(&self, now: Leadership) {
        self.leadership.send_if_modified(|cur| {
            let changed = *cur != now;
            if changed {
                tracing::info!(path = %self.path, leadership = ?now, "leadership");
                *cur = now;
            }
            changed
        });
    }

    pub fn current(&self) -> Leadership {
        *self.leadership.borrow()
    }

    pub fn subscribe(&self) -> watch::Receiver<Leadership> {
        self.leadership.subscribe()
    }

    /// Waits until we lead and returns the fencing token; fails once the task has ended.
    pub async fn await_leadership(&self) -> Result<u64> {
        let mut leadership = self.subscribe();
        let mut ended = self.ended.subscribe();
        loop {
            if let Some(token) = leadership.borrow_and_update().fencing_token() {
                return Ok(token);
            }
            if let Some(outcome) = &*ended.borrow_and_update() {
                return Err(match outcome {
                    Err(e) => e.clone(),
                    Ok(()) => Error::Closed { path: self.path.clone() },
                });
            }
            tokio::select! {
                _ = leadership.changed() => {}
                _ = ended.changed() => {}
            }
        }
    }

    /// As [`Lifecycle::await_leadership`], giving up after `timeout` with `Ok(None)`.
    pub async fn await_leadership_timeout(&self, timeout: Duration) -> Result<Option<u64>> {
        match tokio::time::timeout(timeout, self.await_leadership()).await {
            Ok(token) => token.map(Some),
            Err(_) => Ok(None),
        }
    }
}

/// Whether we lead, and with which fencing token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Leadership {
    /// We lead. The token is the `czxid` of our node: strictly greater than any earlier leader's.
    Leader {
        /// The fencing token of this term.
        fencing_token: u64,
    },
    /// We don't lead (yet, or any more).
    NotLeader,
}

impl Leadership {
    /// Whether this is [`Leadership::Leader`].
    pub fn is_leader(&self) -> bool {
        matches!(self, Leadership::Leader { .. })
    }

    /// The fencing token while leading.
    pub fn fencing_token(&self) -> Option<u64> {
        match self {
            Leadership::Leader { fencing_token } => Some(*fencing_token),
            Leadership::NotLeader => None,
        }
    }
}
