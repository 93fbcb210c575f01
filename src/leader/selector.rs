//! [`LeaderSelector`]: runs a caller's async task while we lead.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, oneshot, watch, Notify};

use super::context::LeadershipContext;
use super::election::{election_handle, lock_setters, Election, Handle};
use super::lifecycle::Leadership;
use crate::error::Result;
use crate::guard::LockGuard;
use crate::lock_core::{LockCore, LockSpec};
use crate::options::LockOptions;
use crate::session::Session;
use crate::status::LockStatus;

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
    /// requeue, 5 s grace, the default [`crate::LossPolicy`], Curator names.
    pub fn new() -> SelectorOptions {
        SelectorOptions { lock: LockOptions::new(), auto_requeue: false, grace: Duration::from_secs(5) }
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
}

lock_setters! {
    SelectorOptions,
    "selector",
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
}

/// How a term ended, as [`LeaderSelector::terms`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TermOutcome {
    /// The task returned: leadership was relinquished.
    Returned,
    /// Leadership was lost (our node deleted, the session expired, suspended under the
    /// default [`crate::LossPolicy`], or [`SelectorOptions::max_hold`] passed); the task was told to
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
/// crate's [`crate::Error`], `Box<dyn std::error::Error + Send + Sync>`, `String`, ...), so that `?`
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
    handle: Arc<Handle<Inner>>,
}

/// What the election task holds.
struct Inner {
    election: Election,
    options: SelectorOptions,
    auto_requeue: AtomicBool,
    /// Set while the selector is queued or leading; cleared while idle after a term.
    queued: AtomicBool,
    requeue: Notify,
    interrupt: Notify,
    terms: broadcast::Sender<TermEnded>,
}

election_handle!(LeaderSelector, Inner, SelectorOptions, "selector");

impl LeaderSelector {
    /// A selector on `path` with its options, the participant id among them (default
    /// `hostname:pid`), as every recipe's `with_options`. Nothing is sent until
    /// [`LeaderSelector::start`].
    ///
    /// # Errors
    /// [`crate::Error::InvalidPath`] for an invalid path.
    pub fn with_options(session: &Session, path: &str, options: SelectorOptions) -> Result<LeaderSelector> {
        let (id, lock) = Election::options(options.lock.clone());
        // Curator's `LeaderSelector` is a mutex on the path: so is ours, not reentrant.
        let spec = LockSpec::exclusive("leader-selector", false);
        // At the term's limit, the run loop stops the task before our node goes.
        let core = LockCore::build(session, path, spec, &lock)?.owner_ends_at_limit();
        let inner = Inner {
            election: Election::new(core, id),
            auto_requeue: AtomicBool::new(options.auto_requeue),
            options,
            queued: AtomicBool::new(false),
            requeue: Notify::new(),
            interrupt: Notify::new(),
            terms: broadcast::channel(16).0,
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
    /// [`crate::Error::AlreadyStarted`] (also when started through a clone), or [`crate::Error::Closed`]
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
        let election = &inner.election;
        let span = tracing::info_span!("leader_selector", path = %election.core.path(), id = %election.id);
        self.inner().queued.store(true, Ordering::SeqCst);
        self.election()
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
        self.election().life.close().await;
        self.election().core.settled().await;
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

    /// How each term ends, from now on (a receiver more than 16 terms behind gets `Lagged`).
    pub fn terms(&self) -> broadcast::Receiver<TermEnded> {
        self.inner().terms.subscribe()
    }
}

/// The election: wait to lead (through the core: our node's deletion while we wait queues us
/// again, an expiry queues us on the new session), run one term, relinquish leadership, and
/// queue again (at once with auto-requeue, else on `requeue()`); stop when closed.
async fn run(inner: Arc<Inner>, task: Task, mut closing: oneshot::Receiver<()>) -> Result<()> {
    loop {
        let Some(guard) = inner.election.await_term(&mut closing).await? else { return Ok(()) };
        let ended = term(&inner, &task, &guard, &mut closing).await;
        let fencing_token = ended.fencing_token;
        match &ended.outcome {
            TermOutcome::Panicked(panic) => {
                tracing::error!(fencing_token, %panic, "leadership task panicked; leadership relinquished")
            }
            TermOutcome::Failed(error) => {
                tracing::warn!(fencing_token, %error, "leadership task failed; leadership relinquished")
            }
            _ => {}
        }
        if let Err(e) = guard.release().await {
            tracing::debug!(error = %e, "relinquishing leadership");
        }
        let closed = ended.outcome == TermOutcome::Closed;
        let requeue = inner.auto_requeue.load(Ordering::SeqCst);
        // Out of the queue before the term's end is told, so that whoever hears it can requeue
        // (`requeue()` stores a permit that the wait below takes).
        if !closed && !requeue {
            inner.queued.store(false, Ordering::SeqCst);
        }
        let _ = inner.terms.send(ended);
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

/// One term, while `guard` holds: runs the task on its own tokio task until it ends, or the
/// term does (a loss, an interrupt, a revocation request, a close); leadership is reported
/// lost at that moment, whatever the task does, and a task still running is stopped
/// ([`stop_task`]).
async fn term(
    inner: &Inner,
    task: &Task,
    guard: &LockGuard,
    closing: &mut oneshot::Receiver<()>,
) -> TermEnded {
    let fencing_token = guard.fencing_token();
    inner.election.life.set(Leadership::Leader { fencing_token });
    let (stop, stop_rx) = watch::channel(false);
    let ctx =
        LeadershipContext { fencing_token, id: inner.election.id.clone(), stop: stop_rx, hold: guard.view() };
    let mut work = tokio::spawn(task(ctx));
    let mut status = guard.status();
    let ended = tokio::select! {
        ended = &mut work => Ok(finished(ended)),
        _ = guard.lost() => Err(TermOutcome::Lost),
        _ = inner.interrupt.notified() => Err(TermOutcome::Interrupted),
        Ok(_) = status.wait_for(|s| *s == LockStatus::RevocationRequested) => Err(TermOutcome::Revoked),
        _ = &mut *closing => Err(TermOutcome::Closed),
    };
    // At the moment of the loss, whatever the task does.
    inner.election.life.set(Leadership::NotLeader);
    match ended {
        // The task returned: nothing to stop.
        Ok(outcome) => TermEnded { fencing_token, outcome, aborted: false },
        Err(outcome) => {
            stop.send_replace(true);
            stop_task(inner, guard, work, TermEnded { fencing_token, outcome, aborted: false }).await
        }
    }
}

/// Stops a task told to stop: awaits its end until its grace (capped by the term's safe
/// window: [`stop_deadline`]) has passed, then aborts it and awaits that. A panic in the
/// meantime becomes the term's outcome; an error the task returns after the stop does not
/// (the term had already ended).
async fn stop_task(
    inner: &Inner,
    guard: &LockGuard,
    mut work: tokio::task::JoinHandle<Option<String>>,
    mut ended: TermEnded,
) -> TermEnded {
    let grace = inner.options.grace;
    let deadline = stop_deadline(grace, guard.safe_until(), &inner.election.core);
    match tokio::time::timeout_at(deadline.into(), &mut work).await {
        Ok(Err(e)) if e.is_panic() => ended.outcome = finished(Err(e)),
        Ok(Ok(Some(error))) => {
            // The term had already ended; its cause stays the outcome.
            let (fencing_token, outcome) = (ended.fencing_token, &ended.outcome);
            let told = "leadership task failed after it was told to stop";
            tracing::info!(fencing_token, %error, ?outcome, "{told}");
        }
        Ok(_) => {}
        Err(_) => {
            tracing::warn!(?grace, "leadership task ignored the stop signal; aborting it");
            work.abort();
            ended.aborted = true;
            // Gone only once awaited: the abort takes effect at the task's next `.await`, and
            // our node (left standing at a hold limit) goes only below.
            if let Err(e) = (&mut work).await {
                if e.is_panic() {
                    ended.outcome = finished(Err(e));
                }
            }
        }
    }
    ended
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
