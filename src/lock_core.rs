//! The acquire/hold/release cycle shared by every lock recipe, on the queue engine.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tracing::Instrument;

use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::hold::Hold;
use crate::options::LockOptions;
use crate::participants::{self, Participant};
use crate::queue::{Admission, Decision, Queue};
use crate::status::LossPolicy;

/// How long an acquire may wait.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wait {
    Forever,
    /// Only if free now.
    Try,
    Until(Instant),
}

/// What makes one lock recipe: its node marker, its admission rule, and whether a handle
/// re-enters its own hold.
pub(crate) struct LockSpec {
    pub recipe: &'static str,
    pub marker: &'static str,
    pub rule: Arc<dyn Admission>,
    pub reentrant: bool,
}

/// Runs `fut` until `wait`'s deadline, when it has one; `None` if the deadline came first (the
/// future is dropped, which every queue future survives: see their cancel safety).
async fn by_deadline<F: std::future::Future>(wait: Wait, fut: F) -> Option<F::Output> {
    match wait {
        Wait::Until(deadline) => tokio::time::timeout_at(deadline.into(), fut).await.ok(),
        Wait::Forever | Wait::Try => Some(fut.await),
    }
}

/// A lock on a queue: a marker for our nodes, a rule for admission, and (when reentrant) the
/// handle's current hold.
pub(crate) struct LockCore {
    pub queue: Queue,
    pub marker: &'static str,
    pub rule: Arc<dyn Admission>,
    pub data: Vec<u8>,
    pub policy: LossPolicy,
    pub recipe: &'static str,
    reentrant: bool,
    /// Serialises acquisitions through one handle, so that a second one re-enters the first's
    /// hold rather than queueing behind it.
    gate: tokio::sync::Mutex<()>,
    current: Mutex<Option<Arc<Hold>>>,
}

impl LockCore {
    pub fn new(queue: Queue, spec: LockSpec, options: &LockOptions) -> LockCore {
        LockCore {
            queue,
            marker: spec.marker,
            rule: spec.rule,
            data: options.data(),
            policy: options.loss_policy,
            recipe: spec.recipe,
            reentrant: spec.reentrant,
            gate: tokio::sync::Mutex::new(()),
            current: Mutex::new(None),
        }
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Option<Arc<Hold>>> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// This handle's live hold, if any (reentrant locks only).
    pub fn held(&self) -> Option<Arc<Hold>> {
        self.current().as_ref().filter(|h| h.retain_possible()).cloned()
    }

    pub async fn acquire(&self, wait: Wait) -> Result<Option<LockGuard>> {
        self.acquire_marked(wait, self.marker).await
    }

    /// Waits without a bound. (`Wait::Forever` never gives `None`; `Closed` would be the
    /// harmless answer should that ever change.)
    pub async fn acquire_forever(&self, marker: &str) -> Result<LockGuard> {
        self.acquire_marked(Wait::Forever, marker)
            .await?
            .ok_or_else(|| Error::Closed { path: self.queue.root.to_string() })
    }

    /// As [`LockCore::acquire`], creating our node with `marker` instead of the recipe's.
    pub async fn acquire_marked(&self, wait: Wait, marker: &str) -> Result<Option<LockGuard>> {
        let span = tracing::info_span!(
            "acquire",
            recipe = self.recipe,
            path = %self.queue.root,
            node = tracing::field::Empty,
            seq = tracing::field::Empty
        );
        self.acquire_inner(wait, marker, span.clone()).instrument(span).await
    }

    async fn acquire_inner(
        &self,
        wait: Wait,
        marker: &str,
        span: tracing::Span,
    ) -> Result<Option<LockGuard>> {
        let _gate = if self.reentrant {
            let gate = match wait {
                Wait::Try => self.gate.try_lock().ok(),
                _ => by_deadline(wait, self.gate.lock()).await,
            };
            let Some(gate) = gate else { return Ok(None) };
            if let Some(hold) = self.current().as_ref().filter(|h| h.retain()) {
                tracing::debug!(node = %hold.path(), "re-entered");
                return Ok(Some(LockGuard::new(hold.clone())));
            }
            Some(gate)
        } else {
            None
        };

        let Some(joined) = by_deadline(wait, self.queue.join(marker, &self.data)).await else {
            // The dropped create is cleaned up in the background; wait for it, so that nothing of
            // ours is left when we return.
            self.queue.janitor.settled().await;
            return Ok(None);
        };
        let (mut entry, children) = joined?;
        span.record("node", entry.name.as_str());
        span.record("seq", entry.seq);

        let admitted = match wait {
            Wait::Try => self
                .queue
                .decide(&entry, self.rule.as_ref(), &children)
                .map(|(_, _, decision)| decision == Decision::Proceed),
            _ => {
                let waiting = self
                    .queue
                    .wait_turn(&mut entry, self.rule.as_ref(), children)
                    .instrument(tracing::debug_span!("wait"));
                match by_deadline(wait, waiting).await {
                    Some(result) => result.map(|()| true),
                    // Past the deadline: not admitted; our node is left below.
                    None => Ok(false),
                }
            }
        };
        match admitted {
            Ok(true) => {
                let hold = Hold::start(entry, self.policy, &self.queue.janitor);
                tracing::debug!(fencing_token = hold.fencing_token(), "acquired");
                if self.reentrant {
                    *self.current() = Some(hold.clone());
                }
                Ok(Some(LockGuard::new(hold)))
            }
            Ok(false) => {
                entry.leave().await?;
                Ok(None)
            }
            Err(e) => {
                if let Err(leave) = entry.leave().await {
                    tracing::debug!(error = %leave, "leaving after an error");
                }
                Err(e)
            }
        }
    }

    pub async fn participants(&self) -> Result<Vec<Participant>> {
        participants::list(&self.queue, self.rule.as_ref()).await
    }

    /// Asks every current holder to release (see [`crate::request_revocation`]); returns how
    /// many requests reached a node.
    pub async fn revoke_holders(&self) -> Result<usize> {
        let mut sent = 0;
        for holder in self.participants().await?.into_iter().filter(|p| p.is_holder) {
            if crate::revocation::request_revocation(&self.queue.client, &self.queue.root.child(&holder.node))
                .await?
            {
                sent += 1;
            }
        }
        Ok(sent)
    }
}
