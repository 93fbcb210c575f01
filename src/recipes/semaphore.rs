//! [`InterProcessSemaphore`]: up to N leases shared across processes.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::lock_core::{
    Acquire, Admission, Decision, LockCore, LockSpec, NameScheme, Participant, QueueEvent, QueueNode,
    QueueStats, Wait,
};
use crate::markers::LEASE as LEASE_MARKER;
use crate::options::LockOptions;
use crate::path::LockPath;
use crate::session::Session;

/// How many leases a node holds: `_c_<uuid>-w<n>-lease-<seq>` holds `n`; a lease node without
/// the weight holds one. A weight that can't be read, or is 0 or above `max` (a foreign or
/// corrupt node), counts as `max`: it is never under-counted, so it can never make us over-admit.
fn weight(node: &QueueNode, max: u64) -> u64 {
    crate::naming::lease_weight(&node.name, max)
}

/// Admits, in queue order, every node whose leases fit with all those ahead of it: the longest
/// prefix of the queue whose total weight is at most `max`. Strict FIFO: a large request at the
/// front is not overtaken by smaller ones behind it.
///
/// Any release may admit the first waiter, so the first waiter wakes on whichever holder
/// releases first: it watches the lease children, with the child watch of a listing (as
/// Curator's `InterProcessSemaphoreV2`, whose one waiter at a time watches them), or the one
/// holder's node when only one is ahead, or every holder's node under a lock delay. Only it
/// does: every later waiter watches the waiter just ahead of it, which writes its node's data
/// again once admitted, so waking stays one at a time (no herd). That write is sent before the
/// acquire returns and answered in the background (`Entry::announce`): an admission waits for no
/// round trip of its own. Where the nodes' ACL denies us WRITE (`LockOptions::acls`), the write
/// is refused: the waiter behind then wakes only when the one ahead of it releases, and a lease
/// another holder frees meanwhile is not taken until then.
pub(crate) struct Weighted {
    pub(crate) max: u64,
}

impl Admission for Weighted {
    fn decide(&self, queue: &[QueueNode], me: usize) -> Decision {
        let mut held: u64 = 0;
        let mut first_waiter = queue.len();
        for (i, node) in queue.iter().enumerate() {
            match held.checked_add(weight(node, self.max)) {
                Some(total) if total <= self.max => held = total,
                _ => {
                    first_waiter = i;
                    break;
                }
            }
        }
        if me < first_waiter {
            Decision::Proceed
        } else if me == first_waiter {
            // Every weight is at most `max`, so the first node always fits: `me` is at least 1.
            Decision::WaitAny { upto: me }
        } else {
            Decision::Wait { on: me - 1, then_proceed: false }
        }
    }

    fn announce_admission(&self, queue: &[QueueNode], me: usize) -> bool {
        me + 1 < queue.len()
    }
}

/// A counting semaphore over ZooKeeper: at most `max_leases` leases are held at once across all
/// processes. As `tokio::sync::Semaphore`, [`InterProcessSemaphore::acquire`] takes one lease and
/// [`InterProcessSemaphore::acquire_many`] takes `n`, all or none, in one node, so multi-lease
/// acquisitions never deadlock against each other. Leases are released by
/// [`LockGuard::release`] or on drop.
///
/// The maximum is stored as the data of the semaphore's path by the first participant; every
/// acquire checks it once its node is in the queue (so the path can't be deleted and re-created
/// meanwhile), and a participant configured with another maximum gets
/// [`Error::LeaseMaxMismatch`].
///
/// A clone is another handle on the same semaphore (it shares the queue and its background
/// cleanups: [`InterProcessSemaphore::settled`] on any clone awaits them all); each acquire,
/// through any clone, queues for its own leases.
///
/// ```no_run
/// # async fn demo(session: zk_recipes::Session) -> zk_recipes::Result<()> {
/// use zk_recipes::InterProcessSemaphore;
/// let slots = InterProcessSemaphore::new(&session, "/semaphores/exports", 4)?;
/// let one = slots.acquire().await?;
/// let two_more = slots.acquire_many(2).await?;
/// assert!(slots.try_acquire_many(2).await?.is_none(), "3 of 4 leases are held");
/// two_more.release().await?;
/// one.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct InterProcessSemaphore {
    core: Arc<LockCore>,
    max: u32,
}

impl std::fmt::Debug for InterProcessSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterProcessSemaphore")
            .field("path", self.core.path())
            .field("max", &self.max)
            .finish()
    }
}

impl InterProcessSemaphore {
    /// A semaphore on `path` with `max_leases` leases.
    ///
    /// # Errors
    /// [`Error::InvalidPath`]; [`Error::BadLeaseCount`] when `max_leases` is 0;
    /// [`Error::UnsupportedFormat`] for kazoo names (kazoo's semaphore is laid out differently).
    pub fn new(session: &Session, path: &str, max_leases: u32) -> Result<InterProcessSemaphore> {
        Self::with_options(session, path, max_leases, LockOptions::default())
    }

    /// As [`InterProcessSemaphore::new`], with options.
    ///
    /// # Errors
    /// As [`InterProcessSemaphore::new`].
    pub fn with_options(
        session: &Session,
        path: &str,
        max_leases: u32,
        options: LockOptions,
    ) -> Result<InterProcessSemaphore> {
        let root = LockPath::new(path)?;
        if options.format != crate::format::NodeFormat::Curator {
            return Err(Error::UnsupportedFormat { recipe: "semaphore", format: options.format });
        }
        if max_leases == 0 {
            return Err(Error::BadLeaseCount { path: root.to_string(), requested: 0, max: 0 });
        }
        let spec = LockSpec {
            recipe: "semaphore",
            scheme: NameScheme::curator(&[LEASE_MARKER]),
            marker: LEASE_MARKER,
            rule: Arc::new(Weighted { max: u64::from(max_leases) }),
            reentrant: false,
            exclusive: false,
            root_data: Some(Arc::from(max_leases.to_string().into_bytes())),
        };
        Ok(InterProcessSemaphore {
            core: Arc::new(LockCore::build(session, root.as_str(), spec, &options)?),
            max: max_leases,
        })
    }

    /// The maximum number of leases.
    pub fn max_leases(&self) -> u32 {
        self.max
    }

    /// Validates `leases` and gives the marker for our node.
    fn prepare(&self, leases: u32) -> Result<String> {
        if leases == 0 || leases > self.max {
            return Err(Error::BadLeaseCount {
                path: self.core.path().to_string(),
                requested: leases,
                max: self.max,
            });
        }
        Ok(format!("w{leases}-{LEASE_MARKER}"))
    }

    async fn acquire_with(&self, leases: u32, wait: Wait) -> Result<Option<LockGuard>> {
        let marker = self.prepare(leases)?;
        self.core.acquire(Acquire::new(wait).marked(&marker)).await
    }

    /// Waits until one lease is held.
    ///
    /// # Errors
    /// [`Error::LeaseMaxMismatch`]; otherwise as [`crate::InterProcessMutex::acquire`].
    ///
    /// # Cancel safety
    /// Cancel-safe: a dropped future leaves no node behind.
    pub async fn acquire(&self) -> Result<LockGuard> {
        self.acquire_many(1).await
    }

    /// Takes one lease only if one is free now (and nobody is queued ahead).
    ///
    /// # Errors
    /// As [`InterProcessSemaphore::acquire`].
    ///
    /// # Cancel safety
    /// As [`InterProcessSemaphore::acquire`].
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.try_acquire_many(1).await
    }

    /// Waits at most `timeout` for one lease; `Ok(None)` leaves nothing behind.
    ///
    /// # Errors
    /// As [`InterProcessSemaphore::acquire`].
    ///
    /// # Cancel safety
    /// As [`InterProcessSemaphore::acquire`].
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.acquire_many_timeout(1, timeout).await
    }

    /// Waits until `leases` leases are held, all at once (one node, one guard).
    ///
    /// # Errors
    /// [`Error::BadLeaseCount`] for 0 or more than the maximum; otherwise as
    /// [`InterProcessSemaphore::acquire`].
    ///
    /// # Cancel safety
    /// Cancel-safe: a dropped future leaves no node behind.
    pub async fn acquire_many(&self, leases: u32) -> Result<LockGuard> {
        let marker = self.prepare(leases)?;
        self.core.acquire(Acquire::forever().marked(&marker)).await?.ok_or_else(|| self.core.closed())
    }

    /// Takes `leases` leases only if they are free now (and nobody is queued ahead).
    ///
    /// # Errors
    /// As [`InterProcessSemaphore::acquire_many`].
    ///
    /// # Cancel safety
    /// As [`InterProcessSemaphore::acquire_many`].
    pub async fn try_acquire_many(&self, leases: u32) -> Result<Option<LockGuard>> {
        self.acquire_with(leases, Wait::Try).await
    }

    /// Waits at most `timeout` for `leases` leases; `Ok(None)` leaves nothing behind.
    ///
    /// # Errors
    /// As [`InterProcessSemaphore::acquire_many`].
    ///
    /// # Cancel safety
    /// As [`InterProcessSemaphore::acquire_many`].
    pub async fn acquire_many_timeout(&self, leases: u32, timeout: Duration) -> Result<Option<LockGuard>> {
        self.acquire_with(leases, Wait::at_most(Some(timeout))).await
    }

    /// Waits for `leases` leases, at most `timeout` when one is given (`Ok(None)` when it
    /// passes), reporting its progress to `events` as [`crate::Lock::acquire_with_events`]
    /// does: queued (how many leases' nodes are ahead, the first node it watches, the first
    /// holder's participant id), moved up, queued again after an expiry, the lock delay, then
    /// acquired or gave up.
    ///
    /// # Errors
    /// As [`InterProcessSemaphore::acquire_many`].
    ///
    /// # Cancel safety
    /// As [`InterProcessSemaphore::acquire_many`]; a dropped future reports
    /// [`crate::GiveUpReason::Cancelled`].
    pub async fn acquire_with_events(
        &self,
        leases: u32,
        timeout: Option<Duration>,
        events: &mut (dyn for<'e> FnMut(&'e QueueEvent) + Send),
    ) -> Result<Option<LockGuard>> {
        let marker = self.prepare(leases)?;
        self.core.acquire(Acquire::at_most(timeout).marked(&marker).reporting(events)).await
    }

    /// Lease holders and waiters in order.
    ///
    /// # Errors
    /// [`Error::SessionExpired`], [`Error::NoAuth`] or [`Error::ZooKeeper`].
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn participants(&self) -> Result<Vec<Participant>> {
        self.core.participants().await
    }

    /// Asks every current lease holder to release, by setting `__REVOKE__` on each holder's
    /// node (Curator's revocation, CURATOR-650); returns how many requests reached a node. A
    /// holder built with [`crate::LockOptions::revocable`] sees
    /// [`crate::LockStatus::RevocationRequested`] and decides; nothing is forced. To ask one
    /// holder only, pass its node to [`crate::request_revocation`] (the nodes are in
    /// [`InterProcessSemaphore::participants`]).
    ///
    /// # Errors
    /// As [`crate::request_revocation`].
    ///
    /// # Cancel safety
    /// A request already sent stays sent.
    pub async fn revoke_holders(&self) -> Result<usize> {
        self.core.revoke_holders().await
    }

    /// What this handle's queue work has cost so far.
    pub fn stats(&self) -> QueueStats {
        self.core.stats()
    }

    /// Resolves once background cleanups of this handle have finished.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn settled(&self) {
        self.core.settled().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, seq: i32) -> QueueNode<'_> {
        QueueNode { name: name.into(), seq, marker: 0 }
    }

    #[test]
    fn weights_come_from_the_name() {
        assert_eq!(weight(&node("_c_6f1d2c3b-0a9e-4c1b-8d7f-5e4a3b2c1d0e-w3-lease-0000000001", 1), 5), 3);
        assert_eq!(weight(&node("_c_6f1d2c3b-0a9e-4c1b-8d7f-5e4a3b2c1d0e-lease-0000000001", 1), 5), 1);
    }

    /// Weights from foreign or corrupt names are never under-counted and never
    /// overflow: unreadable, zero, absurd or above-maximum weights count as the maximum.
    #[test]
    fn corrupt_weights_count_as_the_maximum_and_never_overflow() {
        for corrupt in [
            "_c_x-w-lease-0000000001",
            "_c_x-w0-lease-0000000001",
            "_c_x-w18446744073709551615-lease-0000000001",
            "_c_x-w99999999999999999999999-lease-0000000001",
            "_c_x-w6-lease-0000000001",
            "_c_x-wild-lease-0000000001",
        ] {
            assert_eq!(weight(&node(corrupt, 1), 5), 5, "{corrupt}");
        }
        // Two absurd nodes: summing them must neither panic nor wrap around to a small total.
        let q = [
            node("_c_a-w18446744073709551615-lease-0000000001", 1),
            node("_c_b-w18446744073709551615-lease-0000000002", 2),
            node("_c_c-w1-lease-0000000003", 3),
        ];
        let rule = Weighted { max: u64::MAX };
        assert_eq!(rule.decide(&q, 0), Decision::Proceed);
        assert_eq!(rule.decide(&q, 1), Decision::WaitAny { upto: 1 });
        assert_eq!(rule.decide(&q, 2), Decision::Wait { on: 1, then_proceed: false });
    }

    /// The first waiter waits on any holder (every one of them), later waiters on the
    /// waiter ahead; admission is a FIFO prefix.
    #[test]
    fn the_first_waiter_watches_every_holder_and_later_ones_the_waiter_ahead() {
        let q = [
            node("a-w1-lease-0000000001", 1),
            node("b-w1-lease-0000000002", 2),
            node("c-w1-lease-0000000003", 3),
            node("d-w1-lease-0000000004", 4),
            node("e-w1-lease-0000000005", 5),
        ];
        let rule = Weighted { max: 3 };
        for me in 0..3 {
            assert_eq!(rule.decide(&q, me), Decision::Proceed);
        }
        assert_eq!(rule.decide(&q, 3), Decision::WaitAny { upto: 3 });
        assert_eq!(rule.decide(&q, 4), Decision::Wait { on: 3, then_proceed: false });
        assert!(rule.announce_admission(&q, 3));
        assert!(!rule.announce_admission(&q, 4));
        // A large request at the front is not overtaken by a small one behind it.
        let q = [
            node("a-w2-lease-0000000001", 1),
            node("b-w2-lease-0000000002", 2),
            node("c-w1-lease-0000000003", 3),
        ];
        assert_eq!(rule.decide(&q, 1), Decision::WaitAny { upto: 1 });
        assert_eq!(rule.decide(&q, 2), Decision::Wait { on: 1, then_proceed: false });
    }

    /// Over a whole listing: foreign children (a tombstone, names without a sequence, a lock's
    /// tombstone-like leftovers) are not leases and weigh nothing; a malformed weight counts as
    /// the maximum; a wrapped counter is refused.
    #[test]
    fn a_listing_with_foreign_and_malformed_names() {
        let scheme = NameScheme::curator(&[LEASE_MARKER]);
        let root = LockPath::new("/semaphores/x").unwrap();
        let rule = Weighted { max: 3 };
        let listing: Vec<String> = [
            "_c_d-w1-lease-0000000009",
            "0000000002.released",
            "_c_a-w1-lease-0000000001",
            "max",
            "_c_b-wx-lease-0000000005",
            "_c_c-w1-lease-00000000x7",
            "_c_e-w1-lease-0000000011",
        ]
        .iter()
        .map(|c| c.to_string())
        .collect();
        let decide = |me: &str| crate::queue::decide_on(&scheme, &root, &rule, me, &listing).map(|d| d.2);
        assert_eq!(decide("_c_a-w1-lease-0000000001").unwrap(), Decision::Proceed);
        // `wx` counts as 3: it waits for the one lease ahead, and everyone behind it waits.
        assert_eq!(decide("_c_b-wx-lease-0000000005").unwrap(), Decision::WaitAny { upto: 1 });
        assert_eq!(
            decide("_c_d-w1-lease-0000000009").unwrap(),
            Decision::Wait { on: 1, then_proceed: false }
        );
        assert!(matches!(decide("_c_c-w1-lease-00000000x7"), Err(Error::NodeDeleted { .. })));
        let wrapped: Vec<String> = vec!["_c_a-lease-2147483647".into(), "_c_b-lease--2147483648".into()];
        assert!(matches!(
            crate::queue::decide_on(&scheme, &root, &rule, "_c_a-lease-2147483647", &wrapped),
            Err(Error::SequenceWrapped { .. })
        ));
    }
}
