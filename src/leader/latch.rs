//! [`LeaderLatch`]: the first in sequence order leads, as Curator's `LeaderLatch`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch};

use super::election::{election_handle, lock_setters, Election, Handle};
use super::lifecycle::Leadership;
use crate::error::{Error, Result};
use crate::guard::HoldView;
use crate::lock_core::{FirstN, LockCore, LockSpec, NameScheme};
use crate::markers::LATCH;
use crate::options::LockOptions;
use crate::session::Session;
use crate::status::{LockStatus, LossPolicy};

/// Options for a [`LeaderLatch`]: the lock options an election uses. Curator's latch nodes are
/// `_c_<uuid>-latch-<seq>`, data the participant id in UTF-8; in kazoo format a latch queues as
/// kazoo's `Election` does, with `Lock` names (`__lock__`).
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct LatchOptions {
    lock: LockOptions,
}

impl LatchOptions {
    /// The defaults: participant id `hostname:pid` ([`crate::default_participant_id`]),
    /// [`LossPolicy::SuspendedIsLost`], Curator names.
    pub fn new() -> LatchOptions {
        LatchOptions::default()
    }
}

lock_setters! {
    LatchOptions,
    "latch",
    /// The longest leadership may last (default: no limit), as
    /// [`crate::LockOptions::max_hold`]: when it passes, leadership is lost as on any loss, and
    /// the latch rejoins the election at the back of the queue (alone, it leads again at once).
}

/// Leader election where the participant whose node is first in sequence order leads,
/// interoperable with Curator's `LeaderLatch` on the same path.
///
/// * Leadership is lost the moment our node is deleted or the session expires (and, under the
///   default [`LossPolicy`], while the connection is suspended). It is never kept after our
///   node is gone (CURATOR-171).
/// * The latch only ever deletes the node it created itself, so a stale event can't remove the
///   real leader's node (CURATOR-498).
/// * If someone deletes our node, the latch rejoins the queue at the back, as Curator's `reset()`.
///   After a suspension that the session survives, it resumes leadership if its node is still
///   first, with the same fencing token, instead of rejoining.
/// * After a session expiry the latch rejoins on the [`Session`]'s new session by itself, as
///   Curator's latch resets on `LOST`/`RECONNECTED`: the leadership channel shows the loss, then
///   the regained leadership; [`LeaderLatch::await_leadership`] keeps working. It stops only
///   when closed, or when the session is closed ([`Error::SessionClosed`]).
/// * A revocation request on our node (`__REVOKE__`, as Curator's `Revoker` writes) is reported
///   by [`LeaderLatch::revocation`]; the latch keeps leading until its user closes it (Curator's
///   `LeaderLatch` has no revocation at all).
///
/// A clone is another handle on the same participant, not a new one: clones share one node, one
/// leadership and one lifecycle. [`LeaderLatch::start`] on any clone starts it (once),
/// [`LeaderLatch::close`] on any clone closes it for all, and dropping a clone does nothing
/// while another is alive; when the last one is dropped the latch closes in the background. To
/// share a latch between tasks, clone it (no `Arc` needed); for a second participant, build a
/// second latch.
///
/// ```no_run
/// # async fn demo(session: zk_recipes::Session) -> zk_recipes::Result<()> {
/// use zk_recipes::{LatchOptions, LeaderLatch, Leadership};
/// let options = LatchOptions::new().participant_id("worker-1");
/// let latch = LeaderLatch::with_options(&session, "/election/jobs", options)?;
/// latch.start()?;
/// // A clone for a watcher task: the same participant.
/// let watcher = latch.clone();
/// tokio::spawn(async move { watcher.await_leadership().await });
/// let token = latch.await_leadership().await?;
/// let mut changes = latch.leadership();
/// tokio::select! {
///     _ = changes.wait_for(|l| *l == Leadership::NotLeader) => { /* stop leading */ }
///     _ = async { /* lead, passing `token` along */ } => {}
/// }
/// latch.close().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LeaderLatch {
    handle: Arc<Handle<Inner>>,
}

/// What the election task holds.
struct Inner {
    election: Election,
    policy: LossPolicy,
    /// Whether the current term was asked to step down (`true` until the term ends).
    revocation: watch::Sender<bool>,
    /// The current term's hold, while we lead: where [`LeaderLatch::proclaim`] writes.
    term: std::sync::Mutex<Option<HoldView>>,
}

election_handle!(LeaderLatch, Inner, LatchOptions, "latch");

impl LeaderLatch {
    /// A latch on `path` with explicit options, the participant id among them
    /// ([`LatchOptions::participant_id`], default `hostname:pid`; Curator's
    /// `new LeaderLatch(client, path, id)`), as every recipe's `with_options`. Nothing is sent
    /// until [`LeaderLatch::start`].
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for an invalid path.
    pub fn with_options(session: &Session, path: &str, options: LatchOptions) -> Result<LeaderLatch> {
        let (id, lock) = Election::options(options.lock);
        // One task acquires: it needs no local turn.
        let spec = LockSpec {
            recipe: "leader-latch",
            scheme: NameScheme::curator(&[LATCH]),
            marker: LATCH,
            rule: Arc::new(FirstN(1)),
            reentrant: false,
            exclusive: false,
            root_data: None,
        };
        let core = LockCore::build(session, path, spec, &lock)?;
        let inner = Inner {
            election: Election::new(core, id),
            policy: lock.loss_policy,
            revocation: watch::channel(false).0,
            term: std::sync::Mutex::new(None),
        };
        Ok(LeaderLatch { handle: Arc::new(Handle { inner: Arc::new(inner) }) })
    }

    fn inner(&self) -> &Arc<Inner> {
        &self.handle.inner
    }

    /// Joins the election in a background task.
    ///
    /// # Errors
    /// [`Error::AlreadyStarted`], or [`Error::Closed`] after [`LeaderLatch::close`].
    pub fn start(&self) -> Result<()> {
        let inner = self.inner().clone();
        let span =
            tracing::info_span!("leader_latch", path = %inner.election.core.path(), id = %inner.election.id);
        self.election().life.start(move |closing| tracing::Instrument::instrument(run(inner, closing), span))
    }

    /// Leaves the election: gives up leadership, deletes our node, and waits for that. It closes
    /// the participant for every clone.
    ///
    /// # Cancel safety
    /// If dropped, the latch still closes; its node is deleted in the background.
    pub async fn close(&self) {
        self.election().life.close().await;
        self.election().core.settled().await;
    }

    /// Whether someone asked the current leader, us, to step down ([`crate::request_revocation`]
    /// on our node, [`LeaderLatch::revoke_leader`], `zklock revoke`): `true` from the request
    /// until our term ends, `false` otherwise, starting with the current state.
    ///
    /// The latch only reports the request: it keeps leading (the leadership channel does not
    /// change) until its user steps down with [`LeaderLatch::close`] (and, to contend again,
    /// starts a new latch). A request that reaches our node while we wait is reported when we
    /// lead.
    pub fn revocation(&self) -> watch::Receiver<bool> {
        self.inner().revocation.subscribe()
    }

    /// As [`LeaderLatch::await_leadership`], but `Ok(None)` after `timeout`.
    ///
    /// # Errors
    /// As [`LeaderLatch::await_leadership`].
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn await_leadership_timeout(&self, timeout: Duration) -> Result<Option<u64>> {
        self.election().life.await_leadership_timeout(timeout).await
    }

    /// Proclaims `value` as the leader: what [`crate::LeaderObserver`]s and `participants()`
    /// show as the leader's value (etcd's `Proclaim`). It is stored in our own node, after our
    /// participant id and a newline (`<id>\n<value>`), so it lasts for this term only, and is
    /// fenced by it: a fenced write to the term's node, which exists only while the term lasts.
    ///
    /// Curator's `getLeader()`/`getParticipants()` and kazoo's `contenders()` read a node's
    /// whole data as the id: they show `<id>\n<value>` once a value was proclaimed.
    ///
    /// # Errors
    /// [`Error::LockLost`] if we do not lead, or our term's node is gone (a stale leader); as
    /// [`crate::FencedWriter::commit`] otherwise.
    ///
    /// # Cancel safety
    /// The write is sent when this is called; dropping the future does not withdraw it.
    pub async fn proclaim(&self, value: &[u8]) -> Result<()> {
        let inner = self.inner();
        let lost = || Error::LockLost { path: inner.election.core.path().as_str().to_string() };
        let term = crate::util::lock(&inner.term).clone();
        match term {
            Some(term) if inner.election.life.current().is_leader() => {
                term.proclaim(&inner.election.id, value).await
            }
            _ => Err(lost()),
        }
    }

    /// Resolves once every background cleanup of this latch has finished.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn settled(&self) {
        self.election().core.settled().await
    }
}

/// The election: wait to be first (through the core: our node's deletion while we wait queues
/// us again, an expiry queues us on the new session), lead while the hold lasts; rejoin when
/// our node was deleted or the session expired; stop when closed or when the session is closed.
async fn run(inner: Arc<Inner>, mut closing: oneshot::Receiver<()>) -> Result<()> {
    loop {
        let Some(guard) = inner.election.await_term(&mut closing).await? else { return Ok(()) };
        let token = guard.fencing_token();
        *crate::util::lock(&inner.term) = Some(guard.view());
        let mut status = guard.status();
        loop {
            let now = *status.borrow_and_update();
            inner.election.life.set(if inner.policy.is_lost(now) {
                Leadership::NotLeader
            } else {
                Leadership::Leader { fencing_token: token }
            });
            if now == LockStatus::RevocationRequested {
                inner.revocation.send_if_modified(|asked| !std::mem::replace(asked, true));
            }
            if now == LockStatus::Lost {
                break;
            }
            tokio::select! {
                _ = &mut closing => {
                    inner.election.life.set(Leadership::NotLeader);
                    *crate::util::lock(&inner.term) = None;
                    inner.revocation.send_replace(false);
                    let _ = guard.release().await;
                    return Ok(());
                }
                _ = status.changed() => {}
            }
        }
        // Lost: release our part (the node is gone or goes with the session).
        *crate::util::lock(&inner.term) = None;
        inner.revocation.send_replace(false);
        let _ = guard.release().await;
        if inner.election.core.session().is_closed() {
            return Err(Error::SessionClosed);
        }
        tracing::info!(
            "leadership lost (our node was deleted or the session expired); rejoining the election"
        );
    }
}
