//! [`InterProcessSemaphore`]: up to N leases shared across processes.

use std::time::{Duration, Instant};

use tokio::sync::OnceCell;
use zookeeper_client::{Acls, CreateMode, Error as ZkError};

use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::lock_core::{LockCore, LockSpec, Wait};
use crate::naming::{NameScheme, QueueNode};
use crate::options::LockOptions;
use crate::participants::Participant;
use crate::path::LockPath;
use crate::queue::{retry, Admission, Decision, Queue, QueueStats};
use crate::session::Session;

const LEASE_MARKER: &str = "lease-";
const LEASE_SCHEME: NameScheme = NameScheme::curator(&[LEASE_MARKER]);

/// How many leases a node holds: `_c_<uuid>-w<n>-lease-<seq>` holds `n`; a lease node without the
/// weight holds one.
fn weight(node: &QueueNode) -> u64 {
    let head = node.name.rfind(&format!("-{LEASE_MARKER}")).map_or("", |at| &node.name[..at]);
    head.rsplit_once("-w").and_then(|(_, n)| n.parse().ok()).unwrap_or(1)
}

/// Admits, in queue order, every node whose leases fit with all those ahead of it: a prefix of
/// the queue whose total weight is at most `max`. Strict FIFO: a large request at the front is
/// not overtaken by smaller ones behind it.
///
/// A waiter watches the first node ahead whose departure, together with those before it, frees
/// enough leases; if that node alone frees enough, its deletion admits us without a new listing.
/// (As with Curator's semaphore, a holder further ahead releasing first does not wake us; we
/// proceed when the watched node goes. Never more than `max` leases are held.)
struct Weighted {
    max: u64,
}

impl Admission for Weighted {
    fn decide(&self, queue: &[QueueNode], me: usize) -> Decision {
        let ahead: u64 = queue[..me].iter().map(weight).sum();
        let excess = (ahead + weight(&queue[me])).saturating_sub(self.max);
        if excess == 0 {
            return Decision::Proceed;
        }
        let mut freed = 0;
        for (i, node) in queue[..me].iter().enumerate() {
            freed += weight(node);
            if freed >= excess {
                return Decision::Wait { on: i, then_proceed: weight(node) >= excess };
            }
        }
        // More leases asked than the maximum: the constructor and `acquire` refuse that, so this
        // only happens with a foreign node claiming more than the maximum. Wait on the node
        // ahead; it cannot be admitted either, so the queue stalls visibly rather than overflow.
        Decision::Wait { on: me.saturating_sub(1), then_proceed: false }
    }
}

/// A counting semaphore over ZooKeeper: at most `max_leases` leases are held at once across all
/// processes. `acquire(n)` takes `n` leases all or none, in one node, so multi-lease acquisitions
/// never deadlock against each other. Leases are released by [`LockGuard::release`] or on drop.
///
/// The maximum is stored as the data of the semaphore's path by the first participant; a
/// participant configured with another maximum gets [`Error::LeaseMaxMismatch`].
pub struct InterProcessSemaphore {
    core: LockCore,
    max: u32,
    checked: OnceCell<()>,
}

impl std::fmt::Debug for InterProcessSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterProcessSemaphore")
            .field("path", &self.core.queue.root)
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
        if options.format != crate::NodeFormat::Curator {
            return Err(Error::UnsupportedFormat { recipe: "semaphore", format: options.format });
        }
        if max_leases == 0 {
            return Err(Error::BadLeaseCount { path: root.to_string(), requested: 0, max: 0 });
        }
        let queue = Queue::new(session, root, LEASE_SCHEME).with_acls(options.acls.clone());
        let rule = std::sync::Arc::new(Weighted { max: u64::from(max_leases) });
        let spec = LockSpec { recipe: "semaphore", marker: LEASE_MARKER, rule, reentrant: false, exclusive: false };
        Ok(InterProcessSemaphore {
            core: LockCore::new(queue, spec, &options),
            max: max_leases,
            checked: OnceCell::new(),
        })
    }

    /// The maximum number of leases.
    pub fn max_leases(&self) -> u32 {
        self.max
    }

    /// Stores our maximum at the path, or checks it against the one stored there (once per handle).
    async fn check_max(&self) -> Result<()> {
        self.checked.get_or_try_init(|| self.store_or_compare_max()).await.map(|_| ())
    }

    async fn store_or_compare_max(&self) -> Result<()> {
        let conn = self.core.queue.conn().await?;
        let (client, root) = (&conn.client, self.core.queue.root.as_str());
        let ours = self.max.to_string();
        loop {
            match retry::on_connection_loss(|| client.get_data(root)).await {
                Ok((data, stat)) if data.is_empty() => {
                    match retry::on_connection_loss(|| {
                        client.set_data(root, ours.as_bytes(), Some(stat.version))
                    })
                    .await
                    {
                        Ok(_) => return Ok(()),
                        Err(ZkError::BadVersion | ZkError::NoNode) => continue,
                        Err(e) => return Err(Error::from_zk("store max", root, e)),
                    }
                }
                Ok((data, _)) if data == ours.as_bytes() => return Ok(()),
                Ok((data, _)) => {
                    return Err(Error::LeaseMaxMismatch {
                        path: root.to_string(),
                        configured: self.max,
                        stored: String::from_utf8_lossy(&data).into_owned(),
                    })
                }
                Err(ZkError::NoNode) => {
                    if let Some(parent) = root.rsplit_once('/').map(|(p, _)| p).filter(|p| !p.is_empty()) {
                        let dirs = CreateMode::Container.with_acls(Acls::new(&self.core.queue.acls));
                        retry::on_connection_loss(|| client.mkdir(parent, &dirs))
                            .await
                            .map_err(Error::zk("create parents", root))?;
                    }
                    let node = CreateMode::Container.with_acls(Acls::new(&self.core.queue.acls));
                    match retry::on_connection_loss(|| client.create(root, ours.as_bytes(), &node)).await {
                        Ok(_) | Err(ZkError::NodeExists) => continue,
                        Err(e) => return Err(Error::from_zk("create", root, e)),
                    }
                }
                Err(e) => return Err(Error::from_zk("get", root, e)),
            }
        }
    }

    /// Validates `leases`, checks the stored maximum, and gives the marker for our node.
    async fn prepare(&self, leases: u32) -> Result<String> {
        if leases == 0 || leases > self.max {
            return Err(Error::BadLeaseCount {
                path: self.core.queue.root.to_string(),
                requested: leases,
                max: self.max,
            });
        }
        self.check_max().await?;
        Ok(format!("w{leases}-{LEASE_MARKER}"))
    }

    async fn acquire_with(&self, leases: u32, wait: Wait) -> Result<Option<LockGuard>> {
        let marker = self.prepare(leases).await?;
        self.core.acquire_marked(wait, &marker).await
    }

    /// Waits until `leases` leases are held, all at once.
    ///
    /// # Errors
    /// [`Error::BadLeaseCount`] for 0 or more than the maximum; [`Error::LeaseMaxMismatch`];
    /// otherwise as [`crate::InterProcessMutex::acquire`].
    ///
    /// # Cancel safety
    /// Cancel-safe: a dropped future leaves no node behind.
    pub async fn acquire(&self, leases: u32) -> Result<LockGuard> {
        let marker = self.prepare(leases).await?;
        self.core.acquire_forever(&marker).await
    }

    /// Takes `leases` leases only if they are free now.
    ///
    /// # Errors
    /// As [`InterProcessSemaphore::acquire`].
    ///
    /// # Cancel safety
    /// As [`InterProcessSemaphore::acquire`].
    pub async fn try_acquire(&self, leases: u32) -> Result<Option<LockGuard>> {
        self.acquire_with(leases, Wait::Try).await
    }

    /// Waits at most `timeout` for `leases` leases; `Ok(None)` leaves nothing behind.
    ///
    /// # Errors
    /// As [`InterProcessSemaphore::acquire`].
    ///
    /// # Cancel safety
    /// As [`InterProcessSemaphore::acquire`].
    pub async fn acquire_timeout(&self, leases: u32, timeout: Duration) -> Result<Option<LockGuard>> {
        self.acquire_with(leases, Wait::Until(Instant::now() + timeout)).await
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

    /// What this handle's queue work has cost so far.
    pub fn stats(&self) -> QueueStats {
        self.core.queue.counters.snapshot()
    }

    /// Resolves once background cleanups of this handle have finished.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn settled(&self) {
        self.core.queue.janitor.settled().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, seq: i32) -> QueueNode {
        QueueNode { name: name.into(), seq, marker: 0 }
    }

    #[test]
    fn weights_come_from_the_name() {
        assert_eq!(weight(&node("_c_6f1d2c3b-0a9e-4c1b-8d7f-5e4a3b2c1d0e-w3-lease-0000000001", 1)), 3);
        assert_eq!(weight(&node("_c_6f1d2c3b-0a9e-4c1b-8d7f-5e4a3b2c1d0e-lease-0000000001", 1)), 1);
    }

    #[test]
    fn admits_a_prefix_that_fits_and_waits_in_order() {
        let q = [
            node("a-w2-lease-0000000001", 1),
            node("b-w2-lease-0000000002", 2),
            node("c-w1-lease-0000000003", 3),
        ];
        let rule = Weighted { max: 3 };
        assert_eq!(rule.decide(&q, 0), Decision::Proceed);
        // 2 + 2 > 3: waits on `a`, whose 2 leases alone make room.
        assert_eq!(rule.decide(&q, 1), Decision::Wait { on: 0, then_proceed: true });
        // 2 + 2 + 1 = 5 > 3: must shed 2: `a` alone does it.
        assert_eq!(rule.decide(&q, 2), Decision::Wait { on: 0, then_proceed: true });
        let rule = Weighted { max: 2 };
        // 2 + 2 + 1 = 5 > 2: must shed 3: `a` and `b` together.
        assert_eq!(rule.decide(&q, 2), Decision::Wait { on: 1, then_proceed: false });
    }
}
