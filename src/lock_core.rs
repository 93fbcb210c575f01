//! [`LockCore`]: the engine's one door. Every recipe (the locks, the semaphore, both leader
//! recipes) is a [`LockSpec`] (its node marker and its admission rule) and a [`LockCore`] built
//! from it; the core runs the acquire → hold → release cycle on the queue engine. Recipes see
//! the core, the guard, the rule's vocabulary (re-exported here) and the wire names; never the
//! queue's, the hold's or the entry's insides.

use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use futures_util::future::FutureExt;
use tokio::sync::OwnedMutexGuard;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::hold::{Hold, Limit};
use crate::metrics::Labels;
pub(crate) use crate::naming::{NameScheme, QueueNode};
use crate::options::LockOptions;
pub(crate) use crate::participants::Participant;
use crate::path::LockPath;
pub(crate) use crate::queue::{Admission, Decision, FirstN, QueueEvent, QueueStats, Sink};
use crate::queue::{Entry, GiveUpReason, Progress, Queue};
use crate::session::{Conn, Session};
use crate::status::LossPolicy;
use crate::util::lock;

/// How long an acquire may wait.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wait {
    Forever,
    /// Only if free now. ZooKeeper must answer within the session timeout, or the try fails with
    /// [`Error::Timeout`].
    Try,
    Until(Instant),
}

impl Wait {
    /// At most `timeout` from now, or without a bound.
    pub fn at_most(timeout: Option<std::time::Duration>) -> Wait {
        match timeout.and_then(|t| Instant::now().checked_add(t)) {
            Some(deadline) => Wait::Until(deadline),
            // None, or too far to reach: no bound.
            None => Wait::Forever,
        }
    }
}

/// One acquire request, the recipes' way into the engine ([`LockCore::acquire`]): how long it
/// may wait, and what differs from the recipe's defaults (its node marker, its admission rule,
/// the handle's local turn), and whom to report to.
pub(crate) struct Acquire<'a> {
    wait: Wait,
    /// The marker our node is created with; `None`: the recipe's ([`LockCore::marker`]).
    marker: Option<&'a str>,
    /// The rule that admits it; `None`: the recipe's.
    rule: Option<&'a dyn Admission>,
    /// Whether it takes the handle's local turn first (every exclusive lock's acquire; a
    /// downgrade's read, taken under the write lock, does not).
    take_turn: bool,
    events: Option<Sink<'a>>,
}

impl<'a> Acquire<'a> {
    /// A request that waits as `wait` says, with the recipe's marker, rule and local turn.
    pub fn new(wait: Wait) -> Acquire<'a> {
        Acquire { wait, marker: None, rule: None, take_turn: true, events: None }
    }

    /// A request that waits without a bound.
    pub fn forever() -> Acquire<'a> {
        Acquire::new(Wait::Forever)
    }

    /// A request that waits at most `timeout` (without a bound when `None`).
    pub fn at_most(timeout: Option<std::time::Duration>) -> Acquire<'a> {
        Acquire::new(Wait::at_most(timeout))
    }

    /// Creates our node with `marker` instead of the recipe's (a semaphore's weighted marker).
    pub fn marked(self, marker: &'a str) -> Acquire<'a> {
        Acquire { marker: Some(marker), ..self }
    }

    /// Admitted by `rule` instead of the recipe's, without the handle's local turn (a
    /// downgrade's read, under the write lock that holds the turn).
    pub fn admitted_by(self, rule: &'a dyn Admission) -> Acquire<'a> {
        Acquire { rule: Some(rule), take_turn: false, ..self }
    }

    /// Reports to `events` (see [`QueueEvent`]).
    pub fn reporting(self, events: Sink<'a>) -> Acquire<'a> {
        Acquire { events: Some(events), ..self }
    }
}

/// What makes one lock recipe: its node marker, its admission rule, and whether a handle
/// re-enters its own hold.
pub(crate) struct LockSpec {
    /// The recipe's name in metrics and spans (`mutex`, `read-lock`, `leader-latch`, ...).
    pub recipe: &'static str,
    /// Every marker that takes part in the queue, in Curator's names (the options' format
    /// renames them).
    pub scheme: NameScheme,
    /// The marker of our nodes, in Curator's name.
    pub marker: &'static str,
    pub rule: Arc<dyn Admission>,
    /// Whether a guard may take nested holds ([`LockGuard::reenter`]).
    pub reentrant: bool,
    /// Whether tasks sharing one handle take turns locally before queueing in ZooKeeper (every
    /// exclusive lock); shared locks (readers, semaphore leases) queue each acquire.
    pub exclusive: bool,
    /// The data the queue's root must carry (a semaphore's maximum).
    pub root_data: Option<Arc<[u8]>>,
}

impl LockSpec {
    /// A lock of one holder at a time on a queue of `lock-` nodes (a mutex, a semaphore mutex,
    /// a leader selector): a local turn per handle, reentrant through the guard when
    /// `reentrant`.
    pub fn exclusive(recipe: &'static str, reentrant: bool) -> LockSpec {
        let marker = crate::markers::LOCK;
        LockSpec {
            recipe,
            scheme: NameScheme::curator(&[crate::markers::LOCK]),
            marker,
            rule: Arc::new(FirstN(1)),
            reentrant,
            exclusive: true,
            root_data: None,
        }
    }
}

/// How long a timed acquire that was not admitted waits for its node's delete before leaving it
/// to the background: the "small constant" a deadline may be exceeded by.
pub(crate) const LEAVE_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// Runs `fut` until `deadline`, when there is one; `None` if the deadline came first (the
/// future is dropped, which every queue future survives: see their cancel safety).
///
/// Not an `async fn`: one would keep `fut` twice (as its argument, and again in whichever
/// branch runs), and an acquire's future keeps room for its largest state for as long as a
/// waiter waits (the memory per queued waiter, `tests/memory.rs`). This keeps it once.
fn by_deadline<F: std::future::Future>(
    deadline: Option<Instant>,
    fut: F,
) -> impl std::future::Future<Output = Option<F::Output>> {
    use futures_util::future::Either;
    match deadline {
        Some(deadline) => Either::Left(tokio::time::timeout_at(deadline.into(), fut).map(Result::ok)),
        None => Either::Right(fut.map(Some)),
    }
}

/// Takes the handle's local turn: another task's hold on this handle keeps it, lost or not,
/// until that hold is released or dropped (as a `tokio::sync::Mutex` guard keeps its lock).
/// A deadline bounds the wait (`None`: it passed, or a try found it taken); a close ends it at
/// once with [`Error::SessionClosed`].
async fn take_turn(
    turn: &Arc<tokio::sync::Mutex<()>>,
    wait: Wait,
    deadline: Option<Instant>,
    session: &crate::session::Shared,
) -> Result<Option<OwnedMutexGuard<()>>> {
    Ok(match wait {
        Wait::Try => turn.clone().try_lock_owned().ok(),
        // Free: taken at once, without following the session's close.
        _ => match turn.clone().try_lock_owned() {
            Ok(taken) => Some(taken),
            Err(_) => tokio::select! {
                taken = by_deadline(deadline, turn.clone().lock_owned()) => taken,
                () = session.closing() => return Err(Error::SessionClosed),
            },
        },
    })
}

/// A lock on a queue: a marker for our nodes, a rule for admission, and (for exclusive locks) a
/// local turn that tasks sharing the handle take one at a time.
pub(crate) struct LockCore {
    queue: Queue,
    marker: &'static str,
    rule: Arc<dyn Admission>,
    /// Our nodes' data (the participant id), shared with every entry of this handle.
    data: Arc<[u8]>,
    policy: LossPolicy,
    recipe: &'static str,
    reentrant: bool,
    /// Whether holds report revocation requests ([`LockOptions::revocable`]).
    revocable: bool,
    /// How long a hold may last ([`LockOptions::max_hold`]), and who then deletes its node.
    max_hold: Option<Limit>,
    /// A fair (FIFO) local queue in front of the ZooKeeper queue: only the task whose turn it is
    /// has a node, so many tasks on one handle cost one node at a time, and exclude each other.
    turn: Option<Arc<tokio::sync::Mutex<()>>>,
    /// The latest hold taken through this handle, for `is_held_by_this_handle`.
    current: Mutex<Weak<Hold>>,
    labels: Labels,
}

impl LockCore {
    /// A recipe on `path`: its queue, named in the options' format, with their ACLs.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for an invalid path.
    pub fn build(session: &Session, path: &str, spec: LockSpec, options: &LockOptions) -> Result<LockCore> {
        let queue = Queue::new(session, LockPath::new(path)?, spec.scheme.in_format(options.format))
            .with_acls(options.acls.clone())
            .with_root_data(spec.root_data.clone())
            .watching_own_nodes(options.watches_own_node())
            .hearing_revocations(options.revocable)
            .with_lock_delay(options.lock_delay);
        Ok(LockCore::on(queue, spec, options))
    }

    /// Another recipe on this core's queue (a read/write lock's read side beside its write
    /// side): the same nodes, another marker and rule.
    pub fn beside(&self, spec: LockSpec, options: &LockOptions) -> LockCore {
        LockCore::on(self.queue.clone(), spec, options)
    }

    fn on(queue: Queue, spec: LockSpec, options: &LockOptions) -> LockCore {
        LockCore {
            queue,
            marker: options.format.marker(spec.marker),
            rule: spec.rule,
            data: Arc::from(options.data()),
            policy: options.loss_policy,
            recipe: spec.recipe,
            reentrant: spec.reentrant,
            revocable: options.revocable,
            max_hold: options.max_hold.map(Limit::new),
            turn: spec.exclusive.then(|| Arc::new(tokio::sync::Mutex::new(()))),
            current: Mutex::new(Weak::new()),
            labels: Labels::new(spec.recipe, options.role.as_ref()),
        }
    }

    /// This core's holds, at their maximum hold ([`LockOptions::max_hold`]), are left to their
    /// owner to end: the status turns `Lost` (the owner's cue), and the node stands until the
    /// owner releases the guard, which deletes it as a release after a loss (not clean, so a
    /// lock delay applies). A leader selector's: it stops its task before its node goes.
    pub fn owner_ends_at_limit(mut self) -> LockCore {
        self.max_hold = self.max_hold.map(Limit::owner_deletes);
        self
    }

    /// The lock path.
    pub fn path(&self) -> &LockPath {
        self.queue.root()
    }

    /// The session the recipe was built from.
    pub fn session(&self) -> &Session {
        self.queue.session()
    }

    /// Which of the queue's markers `name` carries, if it is one of the queue's nodes.
    pub fn marker_of(&self, name: &str) -> Option<usize> {
        self.queue.marker_of(name)
    }

    /// What this handle's queue work has cost so far.
    pub fn stats(&self) -> QueueStats {
        self.queue.stats()
    }

    /// Resolves once every background cleanup started through this core has finished.
    pub async fn settled(&self) {
        self.queue.janitor().settled().await
    }

    /// Whether a task holds the lock through this handle now, as far as it knows.
    pub fn held_here(&self) -> bool {
        lock(&self.current).upgrade().is_some_and(|h| h.is_live())
    }

    /// The engine's one door: takes a place in the queue and waits as `request` says, then
    /// hands the admitted node to a hold. Takes the handle's local turn first (exclusive locks,
    /// unless the request says not); queues again on the session's next generation when the
    /// session expires while queued. `Ok(None)`: a try found the lock taken, or the wait's
    /// bound passed (never with [`Wait::Forever`]: see [`LockCore::closed`]).
    ///
    /// # Errors
    /// [`Error::SessionClosed`] once the session is closed; [`Error::Timeout`] when a try got no
    /// answer within the session timeout; the queue's errors (a conflicting node, a wrapped
    /// sequence, a semaphore's maximum that differs, ...).
    ///
    /// # Cancel safety
    /// Cancel-safe: a dropped acquire leaves no node behind (its cleanup runs in the
    /// background; [`LockCore::settled`] awaits it).
    ///
    /// Not an `async fn`: the request is read before the future is made, which then keeps only
    /// what it uses (memory per queued waiter, `tests/memory.rs`).
    pub fn acquire<'a>(
        &'a self,
        request: Acquire<'a>,
    ) -> impl std::future::Future<Output = Result<Option<LockGuard>>> + 'a {
        let span = tracing::info_span!(
            "acquire",
            recipe = self.recipe,
            path = %self.queue.root(),
            node = tracing::field::Empty,
            seq = tracing::field::Empty,
            generation = tracing::field::Empty,
            fencing_token = tracing::field::Empty,
        );
        let Acquire { wait, marker, rule, take_turn, events } = request;
        let request = Request {
            wait,
            marker: marker.unwrap_or(self.marker),
            rule: rule.unwrap_or(self.rule.as_ref()),
            take_turn,
        };
        let acquiring = async move {
            let mut record = Record { labels: &self.labels, started: Instant::now(), outcome: "cancelled" };
            let mut progress = Progress::new(events);
            let result = self.acquire_inner(&request, &mut progress).await;
            record.outcome = match (&result, request.wait) {
                (Ok(Some(_)), _) => "acquired",
                (Ok(None), Wait::Try) => "busy",
                (Ok(None), _) => "timeout",
                (Err(Error::Timeout(_)), _) => "timeout",
                (Err(_), _) => "error",
            };
            if !progress.total_delay().is_zero() {
                self.labels.lock_delay(progress.total_delay());
            }
            progress.end(end_event(&result, matches!(request.wait, Wait::Try)));
            result
        };
        acquiring.instrument(span)
    }

    /// What an acquire that waited without a bound and got no guard means: `Wait::Forever`
    /// never gives `None`; `Closed` is the harmless answer should that ever change.
    pub fn closed(&self) -> Error {
        Error::Closed { path: self.path().to_string() }
    }

    /// The acquire, in its span: the local turn, then attempts (one per session generation)
    /// until one is admitted or misses.
    async fn acquire_inner(
        &self,
        request: &Request<'_>,
        progress: &mut Progress<'_>,
    ) -> Result<Option<LockGuard>> {
        let wait = request.wait;
        let deadline = match wait {
            Wait::Forever => None,
            Wait::Try => Some(Instant::now() + self.queue.session().session_timeout()),
            Wait::Until(deadline) => Some(deadline),
        };
        let session = self.queue.session().shared();
        if session.is_closed() {
            return Err(Error::SessionClosed);
        }
        // The acquire asks for the safe window from now on (the session beats), so that its
        // hold has one when it is admitted (`session/demand.rs`).
        let _asking = session.asking();
        let turn = match (&self.turn, request.take_turn) {
            (Some(turn), true) => match Box::pin(take_turn(turn, wait, deadline, session)).await? {
                Some(taken) => Some(taken),
                None => return Ok(None),
            },
            _ => None,
        };
        loop {
            let Some(conn) = by_deadline(deadline, Box::pin(self.queue.conn())).await else {
                return self.gave_up(wait);
            };
            let conn = conn?;
            tracing::Span::current().record("generation", conn.generation);
            // Read before the next await: held across one, it would take room in every state.
            let entry = match self.attempt(&conn, request, deadline, progress).await {
                Ok(Ok(entry)) => entry,
                Ok(Err(Missed::NotFree)) => return Ok(None),
                Ok(Err(Missed::OutOfTime)) => return self.gave_up(wait),
                Err(Error::SessionExpired) if !conn.session_closed() => {
                    tracing::info!(
                        generation = conn.generation,
                        "the session expired while queued; queueing again on the new session"
                    );
                    progress.requeued(conn.generation + 1);
                    continue;
                }
                Err(Error::SessionExpired) => return Err(Error::SessionClosed),
                // A close deletes our node and ends the client under us: whatever the wait
                // saw first (our node's deletion, say), the session's close is what happened.
                Err(_) if conn.session_closed() => return Err(Error::SessionClosed),
                Err(e) => return Err(e),
            };
            // Admitted: the hold is handed out once its window is proven (at once on a session
            // that was asked for it recently; dropped meanwhile, the entry's node is deleted as
            // after any cancelled acquire).
            Box::pin(session.window_ready(conn.generation, deadline)).await;
            return Ok(Some(self.hold(entry, turn)));
        }
    }

    /// What a deadline that passed means: `Ok(None)` for a timed acquire; for a try, ZooKeeper
    /// did not answer in time.
    fn gave_up(&self, wait: Wait) -> Result<Option<LockGuard>> {
        match wait {
            Wait::Try => Err(Error::Timeout(self.queue.session().session_timeout())),
            _ => Ok(None),
        }
    }

    fn hold(&self, entry: Entry, turn: Option<OwnedMutexGuard<()>>) -> LockGuard {
        let hold = Hold::start(
            self.queue.session().clone(),
            entry,
            self.policy,
            self.queue.janitor(),
            self.reentrant,
            self.revocable,
            turn,
            self.labels.clone(),
            self.max_hold,
        );
        tracing::Span::current().record("fencing_token", hold.fencing_token());
        tracing::debug!(fencing_token = hold.fencing_token(), "acquired");
        *lock(&self.current) = Arc::downgrade(&hold);
        LockGuard::new(hold)
    }

    /// One try on one session: join, then wait (or decide at once), within the deadline. Our
    /// node is left before this returns anything but our admitted entry; a leave cut short by the
    /// deadline goes on in the background.
    async fn attempt(
        &self,
        conn: &Conn,
        request: &Request<'_>,
        deadline: Option<Instant>,
        progress: &mut Progress<'_>,
    ) -> Result<std::result::Result<Entry, Missed>> {
        // A join cut short by the deadline is cleaned up in the background (see `PendingCreate`).
        // Boxed, as the wait: an acquire's future keeps room for its largest state for as long
        // as it lives, and a waiter lives long (memory per queued waiter).
        let joining = Box::pin(self.queue.join(conn, request.marker, &self.data));
        let Some(joined) = by_deadline(deadline, joining).await else {
            return Ok(Err(Missed::OutOfTime));
        };
        let (mut entry, children, root) = self.joined(joined?);
        // Read into `missed` before the leave is awaited (see `acquire_inner`).
        let missed = match self.admit(&mut entry, children, root, request, deadline, progress).await {
            Ok(Ok(())) => return Ok(Ok(entry)),
            Ok(Err(missed)) => Ok(missed),
            Err(e) => Err(e),
        };
        let left = Box::pin(self.leave_bounded(entry)).await;
        match missed {
            Ok(missed) => {
                if let Some(left) = left {
                    left?;
                }
                Ok(Err(missed))
            }
            Err(e) => {
                if let Some(Err(leave)) = left {
                    tracing::debug!(error = %leave, "leaving after an error");
                }
                Err(e)
            }
        }
    }

    /// Whether our joined entry is admitted within the deadline: the root checked (`root`: its
    /// version at the join's listing, `children`), then a try's decision on the join's listing,
    /// or the wait for our turn.
    async fn admit(
        &self,
        entry: &mut Entry,
        children: crate::queue::Children,
        root: Option<crate::queue::RootVersion>,
        request: &Request<'_>,
        deadline: Option<Instant>,
        progress: &mut Progress<'_>,
    ) -> Result<std::result::Result<(), Missed>> {
        // The states that are not the wait are boxed, each only while it runs: the future keeps
        // room for the largest of its states. (Most roots carry no data: nothing to check.)
        if self.queue.root_carries_data() {
            match Box::pin(by_deadline(deadline, self.queue.verify_root(entry.conn(), root))).await {
                None => return Ok(Err(Missed::OutOfTime)),
                Some(Err(e)) => return Err(e),
                Some(Ok(())) => {}
            }
        }
        let rule = request.rule;
        if let Wait::Try = request.wait {
            let (queue, me, decision) = self.queue.decide(entry, rule, &children)?;
            if decision != Decision::Proceed {
                return Ok(Err(Missed::NotFree));
            }
            self.queue.admission(rule, &queue, me).apply(entry);
            return Ok(Ok(()));
        }
        let waiting =
            self.queue.wait_turn(entry, rule, children, progress).instrument(tracing::debug_span!("wait"));
        // Boxed with the deadline's timer only when there is a deadline: a waiter without one
        // keeps no room for a timer.
        let waiting: std::pin::Pin<Box<dyn std::future::Future<Output = Option<Result<()>>> + Send + '_>> =
            match deadline {
                None => Box::pin(waiting.map(Some)),
                Some(deadline) => Box::pin(tokio::time::timeout_at(deadline.into(), waiting).map(Result::ok)),
            };
        match waiting.await {
            Some(result) => result.map(Ok),
            None => Ok(Err(Missed::OutOfTime)),
        }
    }

    /// A join's entry, listing and root version, noted (the queue's length, our node's span).
    fn joined(
        &self,
        joined: crate::queue::Joined,
    ) -> (Entry, crate::queue::Children, Option<crate::queue::RootVersion>) {
        let crate::queue::Joined { entry, children, root } = joined;
        self.labels.queue_length(children.len());
        let span = tracing::Span::current();
        span.record("node", entry.name());
        span.record("seq", entry.seq());
        (entry, children, root)
    }

    /// Leaves the queue after an attempt that was not admitted. While the connection is up,
    /// this waits for the delete, at most [`LEAVE_GRACE`], so that a timed acquire that returns
    /// `None` leaves no node; while it is down, or if the server does not answer in time, the
    /// delete goes on in the background (`settled()` awaits it), so that a deadline is never
    /// stretched by more than that constant, whatever the connection does.
    async fn leave_bounded(&self, entry: Entry) -> Option<Result<()>> {
        let bound = if self.queue.session().state().is_connected() {
            Instant::now() + LEAVE_GRACE.min(self.queue.session().session_timeout())
        } else {
            Instant::now()
        };
        by_deadline(Some(bound), entry.leave()).await
    }

    pub async fn participants(&self) -> Result<Vec<Participant>> {
        crate::participants::list(&self.queue, self.rule.as_ref()).await
    }

    /// Asks every current holder to release (see [`crate::request_revocation`]); returns how
    /// many requests reached a node.
    pub async fn revoke_holders(&self) -> Result<usize> {
        let conn = self.queue.conn().await?;
        let mut sent = 0;
        for holder in self.participants().await?.into_iter().filter(|p| p.is_holder) {
            if self.queue.revoke(&conn, &holder.node).await? {
                sent += 1;
            }
        }
        Ok(sent)
    }
}

/// The event that ends an acquire with `result` (`tried`: a try, for which `None` means busy).
pub(crate) fn end_event(result: &Result<Option<LockGuard>>, tried: bool) -> QueueEvent {
    match result {
        Ok(Some(guard)) => {
            let node = guard.node_path().rsplit('/').next().unwrap_or_default().to_string();
            QueueEvent::Acquired { node, fencing_token: guard.fencing_token() }
        }
        Ok(None) if tried => QueueEvent::GaveUp { reason: GiveUpReason::Busy },
        Ok(None) | Err(Error::Timeout(_)) => QueueEvent::GaveUp { reason: GiveUpReason::TimedOut },
        Err(_) => QueueEvent::GaveUp { reason: GiveUpReason::Failed },
    }
}

/// Records an acquire's outcome when dropped: `cancelled` unless the acquire said otherwise.
struct Record<'a> {
    labels: &'a Labels,
    started: Instant,
    outcome: &'static str,
}

impl Drop for Record<'_> {
    fn drop(&mut self) {
        self.labels.acquire_ended(self.outcome, self.started.elapsed());
    }
}

/// An acquire request with the recipe's defaults filled in.
struct Request<'a> {
    wait: Wait,
    marker: &'a str,
    rule: &'a dyn Admission,
    take_turn: bool,
}

/// Why an attempt ended without admission (its node then left).
enum Missed {
    /// A try found the lock taken.
    NotFree,
    /// The deadline passed.
    OutOfTime,
}
