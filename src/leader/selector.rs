//! [`LeaderSelector`]: runs a caller's async task while we lead.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, oneshot, watch, Notify};

use super::context::LeadershipContext;
use super::lifecycle::{Leadership, Lifecycle};
use crate::error::{Error, Result};
use crate::lock_core::{Acquire, LockCore, LockSpec, Participant};
use crate::options::LockOptions;
use crate::session::Session;
use crate::status::{LockStatus, LossPolicy};

/// Options for a [`LeaderSelector`].
#[derive(Clone, Debug)]
#[must_use]
pub struct SelectorOptions {
    /// What the selector's lock takes: participant id, loss policy, format, ACLs, metrics role.
    lock: LockOptions,
    auto_requeue: bool,
    grace: Duration,
}

impl Default for SelectorOptions {
    fn default() -> SelectorOptions {
        SelectorOptions::new()
    }
}

impl SelectorOptions {
    /// The defaults: participant id `hostname:pid` ([`crate::default_participant_id`]), no
    /// requeue, 5 s grace, the default [`LossPolicy`], Curator names.
    pub fn new() -> SelectorOptions {
        SelectorOptions { lock: LockOptions::new(), auto_requeue: false, grace: Duration::from_secs(5) }
    }

    /// The participant id stored as our node's data (shown by `participants()` and `leader()`,
    /// here and in Curator's `getParticipants()`; Curator's `setId()`), as
    /// [`crate::LockOptions::participant_id`] and [`crate::LatchOptions::participant_id`].
    /// Default: `hostname:pid`.
    pub fn participant_id(mut self, id: impl Into<String>) -> SelectorOptions {
        self.lock = self.lock.participant_id(id);
        self
    }

    /// Rejoin the queue after each term (Curator's `autoRequeue()`).
    pub fn auto_requeue(mut self, on: bool) -> SelectorOptions {
        self.auto_requeue = on;
        self
    }

    /// How long a task may run on after it was told to stop, before the selector aborts it. It is
    /// capped by the term's safe window (see [`LeaderSelector`]). Leadership is reported lost at
    /// once either way.
    pub fn grace(mut self, grace: Duration) -> SelectorOptions {
        self.grace = grace;
        self
    }

    /// The ACLs of the nodes the selector creates (`Acls::creator_all()`, `Acls::anyone_all()`, ...).
    pub fn acls(mut self, acls: zookeeper_client::Acls<'_>) -> SelectorOptions {
        self.lock = self.lock.acls(acls);
        self
    }

    /// Curator's lock names (default) or kazoo's.
    pub fn format(mut self, format: crate::format::NodeFormat) -> SelectorOptions {
        self.lock = self.lock.format(format);
        self
    }

    /// The `role` label of this selector's metrics (see [`crate::LockOptions::metrics_role`]).
    pub fn metrics_role(mut self, role: &str) -> SelectorOptions {
        self.lock = self.lock.metrics_role(role);
        self
    }

    /// Whether a suspended connection ends the term.
    pub fn loss_policy(mut self, policy: LossPolicy) -> SelectorOptions {
        self.lock = self.lock.loss_policy(policy);
        self
    }

    /// The longest a term may last (default: no limit), as [`crate::LockOptions::max_hold`]:
    /// when it passes, leadership is lost and the term ends as on any loss
    /// ([`TermOutcome::Lost`]): [`LeaderSelector::has_leadership`] turns false, the task is told
    /// to stop ([`LeadershipContext::stopped`]) and, as after any loss (a lost term has no safe
    /// window left), aborted unless it has already returned. Unlike a lock's guard holder, the
    /// task is stopped **before** our node is deleted: the selector awaits the task's end (an
    /// abort takes effect at its next `.await`), and only then deletes the node, which admits
    /// the next leader; so two terms' tasks never overlap at a limit. The delete is not a
    /// clean release (as a lock's at its limit). With auto-requeue, the selector queues again
    /// behind the others.
    pub fn max_hold(mut self, limit: Duration) -> SelectorOptions {
        self.lock = self.lock.max_hold(limit);
        self
    }
}

/// How a term ended, as [`LeaderSelector::terms`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TermOutcome {
    /// The task returned: leadership was relinquished.
    Returned,
    /// Leadership was lost (our node deleted, the session expired, suspended under the
    /// default [`LossPolicy`], or [`SelectorOptions::max_hold`] passed); the task was told to
    /// stop.
    Lost,
    /// [`LeaderSelector::interrupt`] ended the term.
    Interrupted,
    /// The task panicked; the message, if it was a string.
    Panicked(String),
    /// The selector was closed.
    Closed,
    /// Someone asked the leader to step down ([`LeaderSelector::revoke_leader`],
    /// [`crate::request_revocation`] on our node, `zklock revoke`): the task was told to stop,
    /// leadership was relinquished; with auto-requeue we queue again, behind the others.
    Revoked,
    /// The task returned an error (Curator: `takeLeadership` threw); the error's `Display`
    /// text. Leadership was relinquished, as for any end of a term.
    Failed(String),
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for () {}
    impl<E: std::fmt::Display> Sealed for Result<(), E> {}
}

/// What a leadership task may return: `()`, or `Result<(), E>` for any `E: Display` (this
/// crate's [`Error`], `Box<dyn std::error::Error + Send + Sync>`, `String`, ...), so that `?`
/// works inside the task. An `Err` ends the term as [`TermOutcome::Failed`]; see
/// [`LeaderSelector::start`]. Implemented for those two shapes only.
pub trait TermResult: sealed::Sealed {
    /// The error's text, for an `Err`.
    #[doc(hidden)]
    fn into_failure(self) -> Option<String>;
}

impl TermResult for () {
    fn into_failure(self) -> Option<String> {
        None
    }
}

impl<E: std::fmt::Display> TermResult for Result<(), E> {
    fn into_failure(self) -> Option<String> {
        self.err().map(|e| e.to_string())
    }
}

/// The end of one term.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TermEnded {
    /// The term's fencing token.
    pub fencing_token: u64,
    /// How it ended.
    pub outcome: TermOutcome,
    /// Whether the task was still running after the stop signal and its grace, and was aborted.
    pub aborted: bool,
}

/// A term's task, boxed; it resolves to the error text of a failed task.
type Task =
    Arc<dyn Fn(LeadershipContext) -> Pin<Box<dyn Future<Output = Option<String>> + Send>> + Send + Sync>;

/// Leader election that runs a task while we lead, as Curator's `LeaderSelector`.
///
/// It contends on an exclusive queue with Curator's lock names (`_c_<uuid>-lock-<seq>`), the
/// way Curator's `LeaderSelector` uses an `InterProcessMutex`. When we lead it spawns the task on
/// its own tokio task, so that the selector notices a loss whatever the task does:
/// * on a loss, [`LeaderSelector::has_leadership`] and the leadership channel turn false at
///   once; the task is told through [`LeadershipContext::stopped`] and aborted after the grace
///   period, or earlier at the term's safe window ([`LeadershipContext::safe_until`]) less a
///   tenth of the session timeout: before anyone else can lead. (An abort takes effect at the
///   task's next `.await`; code that never yields cannot be stopped from outside.) The selector
///   awaits the task's end before it relinquishes leadership; at [`SelectorOptions::max_hold`]
///   our node is deleted only then, once the task has stopped.
/// * a task that returns an error (`Result<(), E>`, see [`TermResult`]) ends the term, as
///   Curator's `takeLeadership` throwing does: leadership is relinquished, the error's text is
///   reported as [`TermOutcome::Failed`] on [`LeaderSelector::terms`] and as a `tracing`
///   warning;
/// * a task that panics ends the term: leadership is relinquished, the panic is reported as
///   [`TermOutcome::Panicked`] on [`LeaderSelector::terms`] and as a `tracing` error;
/// * when the task returns, leadership is relinquished.
///
/// * a revocation request on our node (`__REVOKE__`, Curator's wire format: see
///   [`LeaderSelector::revoke_leader`]) ends the term: the task is told to stop, as on an
///   interrupt, leadership is relinquished, and the term ends as [`TermOutcome::Revoked`]. The
///   selector always honours a request (there is no opt-out): a task that must not be stopped
///   this way should not lead through a path others may revoke (ACLs can refuse them).
///
/// With `auto_requeue` the selector queues again after every term (whether the task returned,
/// failed or panicked), also after its node was deleted by someone else and after a session
/// expiry; without it, it waits for [`LeaderSelector::requeue`].
///
/// A clone is another handle on the same participant, not a new one: clones share one node, one
/// task and one lifecycle. [`LeaderSelector::start`] on any clone starts it (once),
/// [`LeaderSelector::close`] on any clone closes it for all, and [`LeaderSelector::interrupt`],
/// [`LeaderSelector::requeue`] and [`LeaderSelector::terms`] act on the same terms; dropping a
/// clone does nothing while another is alive, and when the last one is dropped the selector
/// closes in the background.
///
/// ```no_run
/// # async fn demo(session: zk_recipes::Session) -> zk_recipes::Result<()> {
/// use zk_recipes::{LeaderSelector, SelectorOptions};
/// let options = SelectorOptions::new().participant_id("worker-1").auto_requeue(true);
/// let selector = LeaderSelector::with_options(&session, "/election/reports", options)?;
/// selector.start(|ctx| async move {
///     // An error ends the term (TermOutcome::Failed); with auto-requeue we queue again.
///     let mut write = ctx.fenced_writer()?;
///     write.add_set_data("/reports/owner", ctx.fencing_token().to_string().as_bytes(), None)?;
///     write.commit().await?;
///     ctx.stopped().await;
///     Ok::<(), zk_recipes::Error>(())
/// })?;
/// // A clone for another task: `interrupt()` there ends this participant's term.
/// let admin = selector.clone();
/// tokio::spawn(async move { admin.interrupt() });
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LeaderSelector {
    handle: Arc<Handle>,
}

/// What the clones of one selector share. The election task holds [`Inner`], not this: the
/// selector closes when the last clone is dropped, whatever the task is doing.
struct Handle {
    inner: Arc<Inner>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.inner.life.close_in_background();
    }
}

struct Inner {
    core: LockCore,
    /// The participant id (the options', or the default).
    id: String,
    options: SelectorOptions,
    auto_requeue: AtomicBool,
    /// Set while the selector is queued or leading; cleared while idle after a term.
    queued: AtomicBool,
    requeue: Notify,
    interrupt: Notify,
    terms: broadcast::Sender<TermEnded>,
    life: Lifecycle,
}

impl std::fmt::Debug for LeaderSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderSelector")
            .field("path", self.inner().core.path())
            .field("id", &self.inner().id)
            .field("leadership", &self.inner().life.current())
            .finish()
    }
}

impl LeaderSelector {
    /// A selector on `path` with default options (participant id `hostname:pid`, no requeue),
    /// as every recipe's `new`. Nothing is sent until [`LeaderSelector::start`].
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for an invalid path.
    pub fn new(session: &Session, path: &str) -> Result<LeaderSelector> {
        Self::with_options(session, path, SelectorOptions::new())
    }

    /// A selector on `path` with its options, the participant id among them (default
    /// `hostname:pid`), as every recipe's `with_options`. Nothing is sent until
    /// [`LeaderSelector::start`].
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for an invalid path.
    pub fn with_options(session: &Session, path: &str, options: SelectorOptions) -> Result<LeaderSelector> {
        let id = options.lock.participant_id.clone().unwrap_or_else(crate::identity::default_participant_id);
        // An election watches its own node (leadership ends the moment it is deleted) and
        // reports revocation requests. Curator's `LeaderSelector` is a mutex on the path: so is
        // ours, not reentrant.
        let lock = options.lock.clone().participant_id(id.clone()).revocable(true);
        let spec = LockSpec::exclusive("leader-selector", false);
        // At the term's limit, the run loop stops the task before our node goes.
        let core = LockCore::build(session, path, spec, &lock)?.owner_ends_at_limit();
        let life = Lifecycle::new(path);
        let inner = Inner {
            core,
            id,
            auto_requeue: AtomicBool::new(options.auto_requeue),
            options,
            queued: AtomicBool::new(false),
            requeue: Notify::new(),
            interrupt: Notify::new(),
            terms: broadcast::channel(16).0,
            life,
        };
        Ok(LeaderSelector { handle: Arc::new(Handle { inner: Arc::new(inner) }) })
    }

    fn inner(&self) -> &Arc<Inner> {
        &self.handle.inner
    }

    /// Starts contending; `task` runs once per term, on its own tokio task. It returns `()` or
    /// `Result<(), E>` ([`TermResult`]): an `Err` ends the term as [`TermOutcome::Failed`]
    /// (then, with auto-requeue, we queue again), so `?` works inside. Rust infers no error type
    /// from `?` alone: end the task with `Ok::<(), zk_recipes::Error>(())` (or your error type).
    ///
    /// # Errors
    /// [`Error::AlreadyStarted`] (also when started through a clone), or [`Error::Closed`]
    /// after close.
    pub fn start<F, Fut>(&self, task: F) -> Result<()>
    where
        F: Fn(LeadershipContext) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: TermResult,
    {
        let task: Task = Arc::new(move |ctx| {
            let work = task(ctx);
            Box::pin(async move { work.await.into_failure() })
        });
        let inner = self.inner().clone();
        let span = tracing::info_span!("leader_selector", path = %inner.core.path(), id = %inner.id);
        self.inner().queued.store(true, Ordering::SeqCst);
        self.inner()
            .life
            .start(move |closing| tracing::Instrument::instrument(run(inner, task, closing), span))
    }

    /// Stops: tells a running task to stop, waits for it (up to the grace period), relinquishes
    /// leadership and deletes our node. It closes the participant for every clone. Concurrent
    /// calls all wait for the close to finish.
    ///
    /// # Cancel safety
    /// If dropped, the selector still closes in the background.
    pub async fn close(&self) {
        self.inner().life.close().await;
        self.inner().core.settled().await;
    }

    /// Turns requeueing after each term on or off.
    pub fn set_auto_requeue(&self, on: bool) {
        self.inner().auto_requeue.store(on, Ordering::SeqCst);
    }

    /// Queues for leadership again after a term ended without auto-requeue (Curator's
    /// `requeue()`). Returns `false` if the selector is already queued or leading, or not
    /// running.
    pub fn requeue(&self) -> bool {
        if self.inner().queued.swap(true, Ordering::SeqCst) {
            return false;
        }
        self.inner().requeue.notify_one();
        true
    }

    /// Ends the current term, if we lead (Curator's `interruptLeadership()`): the task is told to
    /// stop, leadership is relinquished; with auto-requeue we queue again.
    pub fn interrupt(&self) {
        if self.has_leadership() {
            self.inner().interrupt.notify_one();
        }
    }

    /// Asks the current leader of this selector's path (whichever participant it is, this one
    /// included) to step down, by setting `__REVOKE__` on its node (see
    /// [`crate::request_revocation`]); returns how many requests reached a node (0 or 1). A
    /// [`LeaderSelector`] leading there ends its term as [`TermOutcome::Revoked`]; Curator's and
    /// kazoo's leaders ignore the request.
    ///
    /// # Errors
    /// As [`crate::request_revocation`].
    ///
    /// # Cancel safety
    /// A request already sent stays sent.
    pub async fn revoke_leader(&self) -> Result<usize> {
        self.inner().core.revoke_holders().await
    }

    /// This participant's id.
    pub fn id(&self) -> &str {
        &self.inner().id
    }

    /// Whether we lead now. It turns false the moment leadership is lost, whatever the task does.
    pub fn has_leadership(&self) -> bool {
        self.inner().life.current().is_leader()
    }

    /// Leadership changes, starting with the current state.
    pub fn leadership(&self) -> watch::Receiver<Leadership> {
        self.inner().life.subscribe()
    }

    /// How each term ends, from now on (a receiver more than 16 terms behind gets `Lagged`).
    pub fn terms(&self) -> broadcast::Receiver<TermEnded> {
        self.inner().terms.subscribe()
    }

    /// Waits until we lead; returns the term's fencing token.
    ///
    /// # Errors
    /// [`Error::Closed`] if the selector stopped first, or the error that stopped it.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn await_leadership(&self) -> Result<u64> {
        self.inner().life.await_leadership().await
    }

    /// The current leader (the first participant), if any.
    ///
    /// # Errors
    /// [`Error::SessionClosed`], [`Error::NoAuth`] or [`Error::ZooKeeper`].
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn leader(&self) -> Result<Option<Participant>> {
        Ok(self.participants().await?.into_iter().find(|p| p.is_holder))
    }

    /// Every participant in order; the first leads.
    ///
    /// # Errors
    /// [`Error::SessionClosed`], [`Error::NoAuth`] or [`Error::ZooKeeper`].
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn participants(&self) -> Result<Vec<Participant>> {
        self.inner().core.participants().await
    }
}

async fn run(inner: Arc<Inner>, task: Task, mut closing: oneshot::Receiver<()>) -> Result<()> {
    loop {
        let guard = tokio::select! {
            _ = &mut closing => return Ok(()),
            guard = inner.core.acquire(Acquire::forever()) => {
                guard.and_then(|g| g.ok_or_else(|| inner.core.closed()))
            }
        };
        let guard = match guard {
            Ok(guard) => guard,
            // Someone deleted our node while we waited: queue again.
            Err(Error::NodeDeleted { .. }) => continue,
            Err(e) => return Err(e),
        };
        let fencing_token = guard.fencing_token();
        inner.life.set(Leadership::Leader { fencing_token });
        let (stop, stop_rx) = watch::channel(false);
        let ctx =
            LeadershipContext { fencing_token, id: inner.id.clone(), stop: stop_rx, hold: guard.view() };
        let mut work = tokio::spawn(task(ctx));
        let mut status = guard.status();
        let mut done = false;
        let mut outcome = tokio::select! {
            ended = &mut work => {
                done = true;
                finished(ended)
            }
            _ = guard.lost() => TermOutcome::Lost,
            _ = inner.interrupt.notified() => TermOutcome::Interrupted,
            Ok(_) = status.wait_for(|s| *s == LockStatus::RevocationRequested) => TermOutcome::Revoked,
            _ = &mut closing => TermOutcome::Closed,
        };
        // At the moment of the loss, whatever the task does.
        inner.life.set(Leadership::NotLeader);
        let mut aborted = false;
        if !done {
            stop.send_replace(true);
            let deadline = stop_deadline(inner.options.grace, guard.safe_until(), &inner.core);
            match tokio::time::timeout_at(deadline.into(), &mut work).await {
                Ok(Err(e)) if e.is_panic() => outcome = finished(Err(e)),
                Ok(Ok(Some(error))) => {
                    // The term had already ended; its cause stays the outcome.
                    tracing::info!(fencing_token, %error, ?outcome, "leadership task failed after it was told to stop");
                }
                Ok(_) => {}
                Err(_) => {
                    tracing::warn!(grace = ?inner.options.grace, "leadership task ignored the stop signal; aborting it");
                    work.abort();
                    aborted = true;
                    // Gone only once awaited: the abort takes effect at the task's next
                    // `.await`, and our node (left standing at a hold limit) goes only below.
                    if let Err(e) = (&mut work).await {
                        if e.is_panic() {
                            outcome = finished(Err(e));
                        }
                    }
                }
            }
        }
        match &outcome {
            TermOutcome::Panicked(message) => {
                tracing::error!(fencing_token, panic = %message, "leadership task panicked; leadership relinquished")
            }
            TermOutcome::Failed(error) => {
                tracing::warn!(fencing_token, %error, "leadership task failed; leadership relinquished")
            }
            _ => {}
        }
        if let Err(e) = guard.release().await {
            tracing::debug!(error = %e, "relinquishing leadership");
        }
        let closed = outcome == TermOutcome::Closed;
        let requeue = inner.auto_requeue.load(Ordering::SeqCst);
        // Out of the queue before the term's end is told, so that whoever hears it can requeue
        // (`requeue()` stores a permit that the wait below takes).
        if !closed && !requeue {
            inner.queued.store(false, Ordering::SeqCst);
        }
        let _ = inner.terms.send(TermEnded { fencing_token, outcome, aborted });
        if closed {
            return Ok(());
        }
        if !requeue {
            tokio::select! {
                _ = &mut closing => return Ok(()),
                _ = inner.requeue.notified() => {}
            }
        }
    }
}

/// How a finished task ended.
fn finished(ended: std::result::Result<Option<String>, tokio::task::JoinError>) -> TermOutcome {
    match ended {
        Ok(None) => TermOutcome::Returned,
        Ok(Some(error)) => TermOutcome::Failed(error),
        Err(e) if e.is_panic() => {
            let panic = e.into_panic();
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(a non-string panic payload)".to_string());
            TermOutcome::Panicked(message)
        }
        Err(_) => TermOutcome::Returned,
    }
}

/// When a told-to-stop task is aborted: after `grace`, and never later than the term's safe
/// window less a tenth of the session timeout (at once when the term is already lost).
fn stop_deadline(grace: Duration, safe_until: Option<Instant>, core: &LockCore) -> Instant {
    let now = Instant::now();
    let margin = core.session().session_timeout() / 10;
    let bound = safe_until.map_or(now, |t| t.checked_sub(margin).unwrap_or(now));
    (now + grace).min(bound.max(now))
}
