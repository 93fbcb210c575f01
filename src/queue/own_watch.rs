//! The watch on our own node ([`OwnNodeWatch`]): whether one is set, what it will report
//! ([`OwnEvent`]), and what vouches, without a request, that it still speaks for the node
//! ([`OwnCheck`]). An [`Entry`] keeps one
//! and asks it; nothing else sets its state.
//!
//! [`Entry`]: super::entry::Entry

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use zookeeper_client::{Error as ZkError, WatchedEvent};

use super::sender::Sender;
use crate::util::poll_now;

/// What the data watch on our own node reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OwnEvent {
    /// Our node is gone.
    Deleted,
    /// Its data changed (a revocation request?): read it again.
    Changed,
    /// The session ended.
    Session(zookeeper_client::SessionState),
}

impl From<WatchedEvent> for OwnEvent {
    fn from(event: WatchedEvent) -> OwnEvent {
        match event.event_type {
            zookeeper_client::EventType::NodeDeleted => OwnEvent::Deleted,
            zookeeper_client::EventType::Session => OwnEvent::Session(event.session_state),
            _ => OwnEvent::Changed,
        }
    }
}

/// A watch event still to come, boxed so that it can be polled across loop iterations.
pub(crate) type PendingEvent = Pin<Box<dyn Future<Output = OwnEvent> + Send>>;

/// Sets the data watch on our node at `path` without waiting for the answer: the request is
/// sent now, and the returned event resolves once the watch fires (or at once, if the node is
/// gone or already carries a revocation request). A connection loss is not retried here: it
/// resolves as [`OwnEvent::Changed`], which makes the owner read the node again.
///
/// No task is spawned: the returned future is polled once here, which sends the request, and is
/// then polled by its owner. See [`OwnCheck`] for what that allows.
fn watch_own_node(sender: Sender<'_>, path: &str) -> (PendingEvent, OwnCheck) {
    // Taken before the request goes out: any change of the connection after it shows.
    let check = OwnCheck { armed: Arc::default(), state: sender.state() };
    let armed = check.armed.clone();
    // The request's future boxed apart, and the answer's data let go before the wait: this
    // future lives as long as our node, and a waiter keeps it for as long as it waits (memory
    // per queued waiter, `tests/memory.rs`), so it keeps room only for the watch.
    let answer = Box::pin(sender.own_data_watch(path));
    let mut event: PendingEvent = Box::pin(async move {
        let watcher = match answer.await {
            Ok((data, _, watcher)) if data != crate::markers::REVOKE => watcher,
            Ok(_) => return OwnEvent::Changed,
            Err(ZkError::NoNode) => return OwnEvent::Deleted,
            Err(ZkError::SessionExpired | ZkError::ClientClosed | ZkError::SessionMoved) => {
                return OwnEvent::Session(zookeeper_client::SessionState::Expired);
            }
            Err(_) => return OwnEvent::Changed,
        };
        armed.store(true, std::sync::atomic::Ordering::SeqCst);
        watcher.changed().await.into()
    });
    let event = match poll_now(event.as_mut()) {
        // Only a client that is closed already answers at once.
        Some(now) => Box::pin(std::future::ready(now)),
        None => event,
    };
    (event, check)
}

/// The watch on our node carried by the join's listing on a fresh path: a child watch on the
/// root, set by the listing that came after our create. Until it fires, our node exists (its
/// deletion would be a change of the root's children); when it fires, for our deletion or any
/// other change of the children (a contender joining), it resolves as [`OwnEvent::Changed`],
/// which makes the owner read the node again and watch its data from then on. On an
/// uncontended path it saves the data watch's request and reply: its one event is the one our
/// own delete fires. `state` was taken before the listing was sent.
fn own_watch_from_listing(
    watcher: zookeeper_client::OneshotWatcher,
    state: zookeeper_client::StateWatcher,
) -> (PendingEvent, OwnCheck) {
    let event: PendingEvent = Box::pin(async move {
        let event = watcher.changed().await;
        match event.event_type {
            zookeeper_client::EventType::Session => OwnEvent::Session(event.session_state),
            // Which child changed is not told: read our node again.
            _ => OwnEvent::Changed,
        }
    });
    (event, OwnCheck::answered(state))
}

/// What tells a waiter, without a request, that the watch on its own node still speaks for the
/// node: the watch was set (its reply came, and was not an error), and the client's connection
/// has not changed since the request went out.
///
/// ZooKeeper sends a session's replies and events in order, and the client hands them over in
/// that order from one task; our request went out before the watch on the node ahead. So once
/// that node's deletion (or its absence) has been seen, our node's deletion, had it come first,
/// has been seen too. Two things break that order, and both make [`OwnCheck::vouches`] false:
/// a request that failed with the connection (the client would send it again after later ones),
/// and a reconnection, after which the client sets its watches again in an order of its own and
/// the server reports the nodes deleted meanwhile in that order.
pub(crate) struct OwnCheck {
    armed: Arc<std::sync::atomic::AtomicBool>,
    state: zookeeper_client::StateWatcher,
}

impl OwnCheck {
    /// The check for a watch set by an answered request; `state` was taken before it was sent.
    pub fn answered(state: zookeeper_client::StateWatcher) -> OwnCheck {
        OwnCheck { armed: Arc::new(std::sync::atomic::AtomicBool::new(true)), state }
    }

    /// Whether the own-node watch, not fired yet, says our node exists.
    pub fn vouches(&mut self) -> bool {
        if !self.armed.load(std::sync::atomic::Ordering::SeqCst) {
            return false;
        }
        unchanged(&mut self.state)
    }
}

/// Whether the client's connection has not changed since `state` was taken (or last saw a
/// change), without waiting.
fn unchanged(state: &mut zookeeper_client::StateWatcher) -> bool {
    let mut changed = std::pin::pin!(state.changed());
    poll_now(changed.as_mut()).is_none()
}

/// The watch on our own node: deletion by someone else, data changes (revocation). Its state
/// is one value ([`OwnState`]): an event, what vouches for it, and what kind of watch it is
/// come and go together.
#[derive(Default)]
pub(super) struct OwnNodeWatch {
    state: OwnState,
    /// Whether the holder follows that watch (every recipe's, unless its lock turned the watch
    /// off), or only keeps it until its delete consumes it (a waiter set it to be admitted on a
    /// deletion alone).
    follow: bool,
}

/// Where the watch on our own node stands.
#[derive(Default)]
enum OwnState {
    /// None set (our nodes carry none), or it fired and was not set again.
    #[default]
    Unset,
    /// Set, not fired (as far as we have polled it).
    Set {
        /// The watch's event, still to come.
        event: PendingEvent,
        /// Whether that watch, not fired, still says our node exists.
        check: OwnCheck,
        /// Whether the watch is the join's listing's child watch standing in for the data
        /// watch (see [`own_watch_from_listing`]): a holder keeps it, a waiter sets the data
        /// watch.
        from_listing: bool,
    },
}

impl OwnNodeWatch {
    fn set(&mut self, event: PendingEvent, check: OwnCheck, from_listing: bool) {
        self.state = OwnState::Set { event, check, from_listing };
    }

    /// Sets the data watch on our node at `path` without waiting for its answer (see
    /// [`watch_own_node`]).
    pub fn send(&mut self, sender: Sender<'_>, path: &str) {
        let (event, check) = watch_own_node(sender, path);
        self.set(event, check, false);
    }

    /// The data watch an answered request set (`state` taken before it was sent).
    pub fn set_answered(
        &mut self,
        watcher: zookeeper_client::OneshotWatcher,
        state: zookeeper_client::StateWatcher,
    ) {
        let event: PendingEvent = Box::pin(async move { watcher.changed().await.into() });
        self.set(event, OwnCheck::answered(state), false);
    }

    /// The join's listing's child watch stands in for the data watch (see
    /// [`own_watch_from_listing`]); `state` was taken before the listing was sent.
    pub fn set_from_listing(
        &mut self,
        watcher: zookeeper_client::OneshotWatcher,
        state: zookeeper_client::StateWatcher,
    ) {
        let (event, check) = own_watch_from_listing(watcher, state);
        self.set(event, check, true);
    }

    /// Keeps `child`, an event no longer followed, unpolled until the watch set now fires
    /// (dropped unfired, its watch would cost a request to remove it).
    pub fn keep_until_fired(&mut self, child: PendingEvent) {
        let OwnState::Set { event, .. } = &mut self.state else { return };
        let own = std::mem::replace(event, Box::pin(std::future::pending()));
        *event = Box::pin(async move {
            let own = own.await;
            drop(child);
            own
        });
    }

    /// The holder follows the watch (see [`OwnNodeWatch::follows`]).
    pub fn follow(&mut self) {
        self.follow = true;
    }

    /// Whether the holder follows the watch.
    pub fn follows(&self) -> bool {
        self.follow
    }

    pub fn is_set(&self) -> bool {
        matches!(self.state, OwnState::Set { .. })
    }

    pub fn stands_in(&self) -> bool {
        matches!(self.state, OwnState::Set { from_listing: true, .. })
    }

    pub fn take_event(&mut self) -> Option<PendingEvent> {
        match std::mem::take(&mut self.state) {
            OwnState::Set { event, .. } => Some(event),
            OwnState::Unset => None,
        }
    }

    /// Whether the watch has fired by now, without waiting: `None` while it has not (or none
    /// is set). Once fired, it is unset.
    pub fn fired(&mut self) -> Option<OwnEvent> {
        let OwnState::Set { event, .. } = &mut self.state else { return None };
        let fired = poll_now(event.as_mut())?;
        self.state = OwnState::Unset;
        Some(fired)
    }

    /// Whether the watch, set and not fired, says our node exists (see [`OwnCheck`]).
    pub fn vouches(&mut self) -> bool {
        match &mut self.state {
            OwnState::Set { check, .. } => check.vouches(),
            OwnState::Unset => false,
        }
    }

    /// The watch's event; pending for ever while none is set. Once fired, it is unset.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropped before the event, the watch stays as it was.
    pub async fn next(&mut self) -> OwnEvent {
        match &mut self.state {
            OwnState::Set { event, .. } => {
                let fired = event.as_mut().await;
                self.state = OwnState::Unset;
                fired
            }
            OwnState::Unset => std::future::pending().await,
        }
    }
}
