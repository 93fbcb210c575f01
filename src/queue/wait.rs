//! Waiting for our turn (`Queue::wait_turn`): the loop of decisions and waits, and what an
//! admitted waiter does with the watches it no longer needs.

use std::sync::Arc;

use zookeeper_client::{Error as ZkError, EventType};

use super::entry::Entry;
use super::events::{Progress, QueueEvent};
use super::own_watch::OwnEvent;
use super::rule::{Admission, Decision};
use super::sender::Sender;
use super::stats::Count;
use super::watches::{tomb_fired, while_ours_stands, Armed, ArmedWatch, Report, Seen, Watching, Woke};
use super::{session_error, Children, Queue};
use crate::error::{Error, Result};
use crate::naming::QueueNode;
use crate::util::poll_now;

impl Queue {
    /// Waits until `rule` admits our entry, starting from `children` (a listing made after our
    /// node was created), reporting to `progress` and keeping the lock delay's account there.
    ///
    /// Each round decides on a listing, plans what to watch ([`Queue::plan_wait`]), waits for
    /// a watch to fire, and then either enters on that event alone
    /// ([`Queue::enter_behind_head`]) or lists again.
    ///
    /// # Cancel safety
    /// Cancel-safe: the entry is borrowed and stays intact; only the watches on the nodes ahead
    /// (or a first waiter's child watch) are dropped.
    pub async fn wait_turn(
        &self,
        entry: &mut Entry,
        rule: &dyn Admission,
        children: Children,
        progress: &mut Progress<'_>,
    ) -> Result<()> {
        // A waiter keeps only what it watches: with many waiters in one process, each keeping
        // its listing (and the queue parsed from it) would cost memory quadratic in the queue's
        // length, and the state held across this future's waits is room it keeps for as long
        // as it waits (`tests/memory.rs`). So each round is planned from the listing and the
        // listing let go (`next_round`), and what runs only briefly (arming the watches, the
        // listings, entering) is boxed while it runs.
        let mut children = children;
        let mut kept = Kept::default();
        loop {
            // The decision is read in a block of its own: held across the waits below, it would
            // take room in every state of this future.
            let (round, report) = {
                let next = self.next_round(entry, rule, children, progress)?;
                match next {
                    Next::Wait(round, report) => (round, report),
                    Next::Admitted(admission) => {
                        self.keep_leftovers(entry, &mut kept.armed, kept.listed.take());
                        return Box::pin(self.enter_now(entry, admission, progress)).await;
                    }
                }
            };
            entry.watch_own_for_wait(round.enters_on_deletion());
            if round.children_watch {
                children =
                    Arc::new(Box::pin(self.watch_children(entry, &mut kept.listed, report, progress)).await?);
                continue;
            }
            let watching = Watching { names: &round.watched, tomb: round.tomb };
            let tombs = (&mut kept.armed, &mut kept.tombs);
            let arming = self.arm_round(entry, watching, &mut kept.seen, tombs, report, progress);
            let known = Box::pin(arming).await?;
            let woke = match known {
                Some(woke) => woke,
                None => self.until_fired(entry, &mut kept.armed, &round.watched).await?,
            };
            if Box::pin(self.enter_behind_head(entry, &round, woke, &mut kept, progress)).await? {
                return Ok(());
            }
            children = Box::pin(self.list_on(entry.conn())).await?;
            if let Some(delay) = self.lock_delay {
                self.account_departures(entry, &round, woke, (&children, &mut kept.armed), delay, progress);
            }
        }
    }

    /// Decides on `children` (let go here): admitted, with what the admission does to our
    /// entry, or the round to wait (see [`Queue::plan_wait`]) and what to report once its
    /// watches are set.
    fn next_round(
        &self,
        entry: &mut Entry,
        rule: &dyn Admission,
        children: Children,
        progress: &mut Progress<'_>,
    ) -> Result<Next> {
        let (queue, me, decision) = self.decide(entry, rule, &children)?;
        if decision == Decision::Proceed {
            tracing::debug!(position = me, "admitted");
            return Ok(Next::Admitted(self.admission(rule, &queue, me)));
        }
        entry.listed_at(me, queue.len());
        let (mut round, report) = self.plan_wait(rule, &queue, me, decision, progress);
        round.children_watch = self.watches_children(decision);
        Ok(Next::Wait(round, report))
    }

    /// Admitted on a listing: the lock delay's rest, then what the admission does.
    async fn enter_now(
        &self,
        entry: &mut Entry,
        admitted: Admitted,
        progress: &mut Progress<'_>,
    ) -> Result<()> {
        self.hold_back(entry, progress).await?;
        admitted.apply(entry);
        Ok(())
    }

    /// What a waiter at `me` watches this round under `decision` (not `Proceed`), and what
    /// their events will mean; and what to report once it watches, if anything.
    fn plan_wait(
        &self,
        rule: &dyn Admission,
        queue: &[QueueNode],
        me: usize,
        decision: Decision,
        progress: &mut Progress<'_>,
    ) -> (WaitRound, Option<Report>) {
        let (mut tomb, mut head) = (false, None);
        // Whether our node leaves a tombstone if admitted at the head.
        let leaves = self.tombstones() && rule.leaves_tombstone(queue, me);
        let name = |i: usize| Arc::<str>::from(&*queue[i].name);
        let watched: Vec<Arc<str>> = match decision {
            Decision::Proceed => Vec::new(),
            Decision::Wait { on, then_proceed } => {
                let mut ahead = rule.lookahead(queue, me, on).filter(|&a| a < on);
                // With tombstones, the node just ahead tells us itself that it was admitted at
                // the head: its tombstone's watch replaces the look-ahead (and the listing its
                // firing costs). A waiter without a look-ahead (a reader behind a writer) waits
                // as it did.
                if self.tombstones()
                    && ahead.is_some()
                    && !then_proceed
                    && on + 1 == me
                    && rule.leaves_tombstone(queue, on)
                {
                    tomb = true;
                    ahead = None;
                    // Right behind the head, the node just ahead may leave with no tombstone
                    // though admitted at the head (see `Leaving::watched_behind`): then the
                    // head's absence says so (see `WaitRound::head`).
                    head = (on == 1).then(|| name(0));
                }
                let mut watched: Vec<usize> = std::iter::once(on).chain(ahead).collect();
                // With the lock delay, the first waiter (everyone ahead holds) watches every
                // holder: any of them vanishing without a clean release must hold it back, not
                // only the one it waits on (a writer behind several readers).
                if self.lock_delay.is_some() && (0..me).all(|i| rule.decide(queue, i) == Decision::Proceed) {
                    watched.extend((0..me).filter(|i| *i != on && Some(*i) != ahead));
                }
                watched.into_iter().map(name).collect()
            }
            Decision::WaitAny { upto } => (0..upto).map(name).collect(),
        };
        tracing::debug!(position = me, watching = watched.len(), "waiting");
        let report = match progress.listening() {
            true => progress.news(me).map(|first| (first, me, queue[0].name.to_string())),
            false => None,
        };
        let round = WaitRound {
            watched,
            tomb,
            then_proceed: matches!(decision, Decision::Wait { then_proceed: true, .. }),
            // Entering on the deletion of the node waited on makes us the head when that node
            // was the head at this listing and we were right behind it.
            at_head_next: matches!(decision, Decision::Wait { on: 0, .. }) && me == 1 && leaves,
            leaves,
            children_watch: false,
            head,
        };
        (round, report)
    }

    /// Enters on the event that woke us alone when it admits us (see
    /// [`WaitRound::behind_head`]; `Ok(false)`: it does not, list again), if our own node still
    /// exists (someone may have deleted it in an earlier transaction; then we must not enter).
    /// The watch on our own node, set before the ones on the node ahead, tells us without a
    /// request while it vouches (see `OwnCheck`); else we read our node again.
    async fn enter_behind_head(
        &self,
        entry: &mut Entry,
        round: &WaitRound,
        woke: Woke,
        kept: &mut Kept,
        progress: &mut Progress<'_>,
    ) -> Result<bool> {
        let at_head = match round.behind_head(woke, &mut kept.tombs) {
            Behind::Head(at_head) => at_head,
            Behind::IfGone(head) if self.is_gone(&entry.conn().clone(), &head).await? => round.leaves,
            Behind::IfGone(_) | Behind::Unknown => return Ok(false),
        };
        match entry.own_fired() {
            Some(OwnEvent::Deleted) => return Err(entry.gone()),
            Some(OwnEvent::Session(state)) => return Err(session_error(state)),
            None if entry.own_vouches() => {
                tracing::debug!("node ahead was the head: admitted without a request");
            }
            // The data changed (a revocation request?), the watch could not be set, or the
            // connection changed since: read our node again, and watch it again.
            Some(OwnEvent::Changed) | None => {
                self.counters.bump(Count::OwnReread);
                entry.watch_self().await?;
                tracing::debug!("node ahead was the head: admitted once our node was read");
            }
        }
        self.counters.bump(Count::RelistSaved);
        if round.tomb && !round.then_proceed {
            self.counters.bump(Count::BehindHead);
        }
        entry.admitted_at_head(at_head);
        if let Some(delay) = self.lock_delay {
            progress.vanished_unclean(delay, &round.watched[0]);
            entry.hold_back(delay);
        }
        // Unfired tombstone watches never fire: dropped (removed), not kept.
        kept.tombs.clear();
        self.keep_leftovers(entry, &mut kept.armed, kept.listed.take());
        self.hold_back(entry, progress).await?;
        Ok(true)
    }

    /// Whether the node `name` is gone, read once (no watch). Sent after the watch on our own
    /// node was set, its answer comes after any event of that watch for a change before it: our
    /// own node's deletion, if it came first, is seen by then.
    async fn is_gone(&self, conn: &crate::session::Conn, name: &str) -> Result<bool> {
        let path = self.root.child(name);
        match Sender::new(conn, &self.root).exists(&path).await {
            Ok(found) => Ok(found.is_none()),
            // Not known: list again.
            Err(e) if crate::error::is_connection_loss(&e) => Ok(false),
            Err(e) => Err(Error::from_zk("exists", &path, e)),
        }
    }

    /// With the lock delay, after a listing: a watched node that is gone left cleanly if its
    /// watch saw a data change (a clean release is a data change and a delete in one
    /// transaction: see `Conn::send_delete`), and not if it saw a deletion. ZooKeeper delivers
    /// a watch's event before the reply to a later request that shows the change, so by now
    /// its watch has fired, unless it was not set in time (the node was gone before it): that
    /// counts as unclean.
    fn account_departures(
        &self,
        entry: &mut Entry,
        round: &WaitRound,
        woke: Woke,
        (children, armed): (&[String], &mut Armed),
        delay: std::time::Duration,
        progress: &mut Progress<'_>,
    ) {
        for (i, name) in round.watched.iter().enumerate() {
            if children.iter().any(|child| **child == **name) {
                continue;
            }
            let clean = match armed.remove(name).and_then(|mut watch| poll_now(watch.as_mut())) {
                Some(event) => event.event_type == EventType::NodeDataChanged,
                None => woke == Woke::Changed(Some(i)),
            };
            if !clean {
                progress.vanished_unclean(delay, name);
                entry.hold_back(delay);
            }
        }
    }

    /// Once admitted: the watches that have not fired (on nodes ahead, or a first waiter's child
    /// watch on the root, `listed`) are kept until they fire, by the session. Dropped, each
    /// would cost a request to remove it; kept, its one event.
    fn keep_leftovers(&self, entry: &Entry, armed: &mut Armed, listed: Option<ArmedWatch>) {
        let mut leftovers: Vec<_> =
            armed.drain().map(|(name, watch)| (self.root.child(&name), watch)).collect();
        leftovers.extend(listed.map(|watch| (self.root.as_str().to_string(), watch)));
        entry.conn().keep_until_fired(leftovers);
    }

    /// Whether a waiter under `decision` waits on a child watch on the root (see
    /// [`Queue::watch_children`]) rather than a data watch on each node it waits for: a first
    /// waiter that any of several holders may admit, when no lock delay needs to know how each
    /// one left (a clean release is a data change: see `wait_turn`).
    fn watches_children(&self, decision: Decision) -> bool {
        matches!(decision, Decision::WaitAny { upto } if upto >= 2) && self.lock_delay.is_none()
    }

    /// A first waiter that any of several holders may admit (a semaphore's) waits for a change
    /// of the root's children, and lists them again with a new child watch: one listing per
    /// change, where a data watch on every holder costs a request per holder and leaves the
    /// others' to remove or to fire. Any change wakes it, a join behind it or a waiter giving up
    /// included: a notification and a listing each. The first time (`listed` empty: the last listing set no
    /// watch), it lists at once. Only the first waiter watches the children: a change notifies
    /// it, and at most the waiters admitted since the last change, whose watches are kept until
    /// they fire (no herd). A listing and its watch are one step on the server: no change
    /// after it is missed. (A watch set by an earlier listing than the one decided on fires for
    /// changes that listing shows already: one listing more, nothing missed.)
    ///
    /// # Cancel safety
    /// Cancel-safe: the entry stays intact; the child watch is dropped (removed).
    async fn watch_children(
        &self,
        entry: &mut Entry,
        listed: &mut Option<ArmedWatch>,
        report: Option<Report>,
        progress: &mut Progress<'_>,
    ) -> Result<Vec<String>> {
        if let Some(watch) = listed.take() {
            if let Some((first, ahead, head)) = report {
                let holder = Sender::new(entry.conn(), &self.root).read(&self.root.child(&head)).await.ok();
                let holder = holder.map(|(data, _)| crate::naming::split_data(&data).0);
                // Reported once we watch: whatever the caller does on hearing it, we will see.
                self.report_wait(entry.name(), progress, (first, ahead), holder, &head);
            }
            let event = while_ours_stands(entry, watch).await?;
            if event.event_type == EventType::Session {
                return Err(session_error(event.session_state));
            }
            self.counters.bump(Count::Wakeup);
        }
        self.list_watching(entry, listed).await
    }

    /// Lists the root's children with a child watch, kept in `listed` (see
    /// [`Queue::watch_children`]).
    async fn list_watching(&self, entry: &mut Entry, listed: &mut Option<ArmedWatch>) -> Result<Vec<String>> {
        self.counters.bump(Count::Listing);
        match Sender::new(entry.conn(), &self.root).list_watching().await {
            Ok((children, watcher)) => {
                *listed = Some(Box::pin(watcher.changed()));
                Ok(children)
            }
            Err(ZkError::NoNode) => Ok(Vec::new()),
            Err(e) => Err(Error::from_zk("list", self.root.as_str(), e)),
        }
    }

    /// Reports a wait with `ahead` nodes in front of ours (`Queued` when `first`, else
    /// `MovedUp`), with the participant id of the head of the queue.
    pub(super) fn report_wait(
        &self,
        node: &str,
        progress: &mut Progress<'_>,
        (first, ahead): (bool, usize),
        holder: Option<String>,
        watching: &str,
    ) {
        let watching = watching.to_string();
        progress.reported(ahead);
        progress.emit(if first {
            QueueEvent::Queued { node: node.to_string(), ahead, watching, holder }
        } else {
            QueueEvent::MovedUp { ahead, watching, holder }
        });
    }

    /// The lock delay: when a node ahead of ours vanished without a clean release, waits out
    /// the rest of the delay before entering, still watching our own node (its deletion, or
    /// the session's end, is an error as in any wait).
    async fn hold_back(&self, entry: &mut Entry, progress: &mut Progress<'_>) -> Result<()> {
        let Some((until, vanished)) = progress.delay() else { return Ok(()) };
        let wait = until.saturating_duration_since(std::time::Instant::now());
        tracing::info!(
            vanished,
            wait_ms = wait.as_millis() as u64,
            "lock delay: a node ahead vanished without a clean release"
        );
        let event = QueueEvent::LockDelay { wait, vanished: vanished.to_string() };
        progress.delayed(wait);
        progress.emit(event);
        if !entry.watches_own() {
            // Without it, neither our node's deletion nor the session's end (a close, an
            // expiry: both delete our node) would end the wait.
            entry.watch_self().await?;
        }
        while_ours_stands(entry, tokio::time::sleep_until(until.into())).await
    }

    /// What `rule`'s admission of our node at `me` on `queue` does to our entry (see
    /// [`Admitted::apply`]). Pure: decided on the listing, applied once we enter.
    pub fn admission(&self, rule: &dyn Admission, queue: &[QueueNode], me: usize) -> Admitted {
        Admitted {
            // Every node before ours is gone: our release may say so (see `Leaving::tomb`).
            at_head: me == 0 && self.tombstones() && rule.leaves_tombstone(queue, me),
            place: (me, queue.len()),
            announce: rule.announce_admission(queue, me),
        }
    }
}

/// What an admission on a listing does to our entry (see [`Queue::admission`]).
pub(crate) struct Admitted {
    /// Admitted at the head, with a tombstone to leave.
    at_head: bool,
    /// Our place in the listing, and its length.
    place: (usize, usize),
    /// Whether to tell the waiter behind us (see [`Entry::announce`]).
    announce: bool,
}

impl Admitted {
    /// Marks our entry admitted: at the head (see `Leaving::tomb`), at its place in our latest
    /// listing (whether a waiter may watch our tombstone: see `Leaving::watched_behind`), and
    /// tells the waiters behind us when the rule asks for it (sent now, its answer awaited in
    /// the background).
    pub fn apply(self, entry: &mut Entry) {
        if self.at_head {
            entry.admitted_at_head(true);
        }
        entry.listed_at(self.place.0, self.place.1);
        if self.announce {
            entry.announce();
        }
    }
}

/// The watches a waiter keeps from one round to the next.
#[derive(Default)]
struct Kept {
    /// Per watched node, the latest data change we have accounted for (see `arm_round`).
    seen: Seen,
    /// Watches set in an earlier round that have not fired: kept, not set again.
    armed: Armed,
    /// A first waiter's child watch on the root, set by its latest listing (see
    /// `watch_children`); not fired yet.
    listed: Option<ArmedWatch>,
    /// The exists watch on the tombstone of the node just ahead (see `Queue::tombstones`), by
    /// that node's name: it fires only if that node leaves having been admitted at the head.
    tombs: Armed,
}

/// What a waiter watches in one round, and what their events mean.
struct WaitRound {
    /// The nodes ahead that wake it, the one it waits on first. Their names are shared with
    /// the watches kept on them (`Armed`): a waiter keeps them for as long as it waits.
    watched: Vec<Arc<str>>,
    /// Whether it watches the tombstone of the node it waits on too (then the node just ahead,
    /// watched alone).
    tomb: bool,
    /// The deletion of the node waited on alone admits it.
    then_proceed: bool,
    /// Entering on that deletion makes it the head (that node was the head at this listing).
    at_head_next: bool,
    /// Our node leaves a tombstone if admitted at the head.
    leaves: bool,
    /// It waits on a child watch on the root (see [`Queue::watch_children`]).
    children_watch: bool,
    /// With `tomb`, when the node waited on was right behind the head at this listing: the
    /// head's name. That node leaves no tombstone when its own latest listing showed it there
    /// with nobody after it (`Leaving::watched_behind`), so its deletion without one is
    /// ambiguous: it left at the head, or gave up behind it. The head's absence, read once
    /// that deletion is heard, tells: every node that was ahead of ours is gone, and we are
    /// the head (nodes created since are behind us).
    head: Option<Arc<str>>,
}

/// What the event that woke a waiter says (see [`WaitRound::behind_head`]).
enum Behind {
    /// It is admitted; whether at the head.
    Head(bool),
    /// It is the head, and admitted at it, if the node named (the head of its listing) is gone.
    IfGone(Arc<str>),
    /// It must list again.
    Unknown,
}

/// What a listing says to a waiter: admitted (and what the admission does to our entry), or
/// the round to wait and what to report once it watches.
enum Next {
    Admitted(Admitted),
    Wait(WaitRound, Option<Report>),
}

impl WaitRound {
    /// Whether the waiter may enter on a deletion of the node it waits on alone (its own node
    /// then needs a watch, set before the one on the node ahead).
    fn enters_on_deletion(&self) -> bool {
        self.then_proceed || self.tomb
    }

    /// The node whose tombstone it watches, if any.
    fn tomb_for(&self) -> Option<&str> {
        self.tomb.then(|| &*self.watched[0])
    }

    /// Whether the event that woke us admits us without a listing, and if so whether we are
    /// then admitted at the head. The node ahead was the head at our listing and is gone: nodes
    /// created since are behind us, so we are the head now. So too when the node just ahead is
    /// gone and its tombstone's creation came first: it was admitted at the head, every node
    /// before it gone (see `Queue::tombstones`); or, with no tombstone, when the head of our
    /// listing is gone too (see [`WaitRound::head`]). (The node waited on is the first
    /// watched; any other is looked at again.)
    fn behind_head(&self, woke: Woke, tombs: &mut Armed) -> Behind {
        match (woke, self.tomb_for()) {
            (Woke::Deleted(0), _) if self.then_proceed => Behind::Head(self.at_head_next),
            (Woke::Deleted(0), Some(name)) if tomb_fired(tombs, name) => Behind::Head(self.leaves),
            (Woke::Deleted(0), Some(_)) => match &self.head {
                Some(head) => Behind::IfGone(head.clone()),
                None => Behind::Unknown,
            },
            _ => Behind::Unknown,
        }
    }
}
