//! The watches a waiter sets on the nodes ahead of it, and on its own node while it waits.

use zookeeper_client::{Error as ZkError, EventType};

use super::entry::Entry;
use super::events::Progress;
use super::own_watch::OwnEvent;
use super::sender::Sender;
use super::stats::Count;
use super::{session_error, Queue};
use crate::error::{Error, Result};

impl Queue {
    /// Waits until one of the nodes named in `watching` is deleted (or its data changes), while
    /// watching our own node too; reports the wait (`report`: first of its attempt, how many
    /// ahead, the head's name) once the watches are set. The tombstone named in `watching` is
    /// watched too (in `tombs`), before the nodes, but never wakes us: its creation comes just
    /// before its node's deletion, which does (see `Queue::tombstones`).
    ///
    /// A change made between our listing and our watch would be missed by the watch, so a node
    /// whose data changed after our node was created (and after the last change we already
    /// looked again for, kept in `seen`) wakes us at once.
    pub(super) async fn until_any_gone(
        &self,
        entry: &mut Entry,
        watching: Watching<'_>,
        seen: &mut std::collections::HashMap<String, i64>,
        (armed, tombs): (&mut Armed, &mut Armed),
        report: Option<(bool, usize, String)>,
        progress: &mut Progress<'_>,
    ) -> Result<Woke> {
        let names = watching.names;
        let conn = entry.conn().clone();
        let sender = Sender::new(&conn, &self.root);
        // A watch we no longer need is dropped (removed); one we still need is kept as it is:
        // it has seen every change since it was set.
        armed.retain(|name, _| names.contains(name));
        tombs.retain(|name, _| Some(name.as_str()) == watching.tomb_for);
        // The tombstone's exists watch goes first: its creation, if it comes, is then reported
        // before the node's deletion, or before the answer that finds the node gone.
        let tomb = watching.tomb_for.filter(|name| !tombs.contains_key(name)).map(|name| {
            let path = crate::markers::tombstone_of(&self.root.child(name));
            (name, Box::pin(sender.watch_tomb(&path)))
        });
        let paths: Vec<String> = names.iter().map(|n| self.root.child(n)).collect();
        // Sent back to back, answered in order.
        let requests: Vec<_> = names
            .iter()
            .zip(&paths)
            .map(|(name, path)| (!armed.contains_key(name)).then(|| sender.watch_ahead(path)))
            .collect();
        // The head's participant id, for a report: read behind the watches.
        let head = report.as_ref().map(|(_, _, head)| Box::pin(sender.read(&self.root.child(head))));
        if let Some((name, request)) = tomb {
            arm_tomb(tombs, name, request.await);
        }
        let arming = arm_watches(requests, (names, &paths), seen, armed, entry.czxid());
        let changed = match Box::pin(arming).await? {
            Ok(changed) => changed,
            Err(woke) => return Ok(woke),
        };
        if let (Some((first, ahead, _)), Some(head)) = (report, head) {
            let holder = head.await.ok().map(|(data, _)| crate::naming::split_data(&data).0);
            // Reported once we watch: whatever the caller does on hearing it, we will see.
            self.report_wait(entry.name(), progress, (first, ahead), holder, &names[0]);
        }
        if changed {
            return Ok(Woke::Changed(None));
        }
        let (at, event) = while_ours_stands(entry, first_fired(armed, names)).await?;
        match event.event_type {
            EventType::NodeDeleted => {
                self.counters.bump(Count::Wakeup);
                Ok(Woke::Deleted(at))
            }
            EventType::Session => Err(session_error(event.session_state)),
            // Its data changed (a waiter ahead was admitted, a revocation request, or a clean
            // release with the lock delay on): look again.
            _ => Ok(Woke::Changed(Some(at))),
        }
    }
}

/// Reads the answers to the data watches sent on the nodes `names` (at `paths`; `None`: kept
/// from an earlier round), keeping each set one in `armed`. `Ok(Ok(changed))` once all are
/// set: whether a node's data changed after our node was created (`czxid`) and after the last
/// change accounted for in `seen`. `Ok(Err(woke))` when a node was gone, or the connection
/// lost (the watches are set again by looking again once the client is back).
async fn arm_watches<F>(
    requests: Vec<Option<F>>,
    (names, paths): (&[String], &[String]),
    seen: &mut std::collections::HashMap<String, i64>,
    armed: &mut Armed,
    czxid: i64,
) -> Result<std::result::Result<bool, Woke>>
where
    F: std::future::Future<
        Output = std::result::Result<
            (Vec<u8>, zookeeper_client::Stat, zookeeper_client::OneshotWatcher),
            ZkError,
        >,
    >,
{
    let mut changed = false;
    for (at, (request, path)) in requests.into_iter().zip(paths).enumerate() {
        let Some(request) = request else { continue };
        match request.await {
            Ok((_, stat, watcher)) => {
                let accounted = seen.get(path).copied().unwrap_or(czxid);
                if stat.mzxid > stat.czxid && stat.mzxid > accounted {
                    seen.insert(path.clone(), stat.mzxid);
                    changed = true;
                }
                armed.insert(names[at].clone(), Box::pin(watcher.changed()));
            }
            Err(ZkError::NoNode) => return Ok(Err(Woke::Deleted(at))),
            Err(e) if crate::error::is_connection_loss(&e) => return Ok(Err(Woke::Changed(None))),
            Err(e) => return Err(Error::from_zk("watch", path, e)),
        }
    }
    Ok(Ok(changed))
}

/// Keeps the exists watch on the tombstone of the node `name` (see `Queue::tombstones`), from
/// the answer to the request that set it.
fn arm_tomb(
    tombs: &mut Armed,
    name: &str,
    answer: std::result::Result<(Option<zookeeper_client::Stat>, zookeeper_client::OneshotWatcher), ZkError>,
) {
    match answer {
        // Nothing of that name: the watch waits for its creation.
        Ok((None, watcher)) => {
            tombs.insert(name.to_string(), Box::pin(watcher.changed()));
        }
        // A node of that name stands (nothing of ours makes one that lasts): its watch would
        // never tell a creation. Dropped; we list when the node goes.
        Ok((Some(_), _)) => tracing::debug!(node = name, "a node stands at a tombstone's name"),
        // Without the watch, we list when the node goes.
        Err(e) => tracing::debug!(node = name, error = %e, "could not watch a tombstone"),
    }
}

/// The first of the watches in `armed` on `names` to fire, with its index in `names`; spent,
/// it is removed.
fn first_fired<'a>(
    armed: &'a mut Armed,
    names: &'a [String],
) -> impl std::future::Future<Output = (usize, zookeeper_client::WatchedEvent)> + 'a {
    std::future::poll_fn(move |cx| {
        for (at, name) in names.iter().enumerate() {
            let Some(watcher) = armed.get_mut(name) else { continue };
            if let std::task::Poll::Ready(event) = std::future::Future::poll(watcher.as_mut(), cx) {
                // Fired: it is spent.
                armed.remove(name);
                return std::task::Poll::Ready((at, event));
            }
        }
        std::task::Poll::Pending
    })
}

/// What a waiter watches: `names`, the nodes ahead that wake it (the one it waits on first),
/// and `tomb_for`, the node just ahead whose tombstone it watches too, if any.
#[derive(Clone, Copy)]
pub(super) struct Watching<'a> {
    pub names: &'a [String],
    pub tomb_for: Option<&'a str>,
}

/// Whether the tombstone of the node `name` was created (its watch in `tombs` fired with a
/// creation): that node was admitted at the head, so once it is gone every node before ours
/// is. Nothing but a release of ours creates a tombstone (see `Conn::send_delete`). Its watch
/// is spent either way: one that has not fired by the time its node is gone never will (the
/// creation comes first, in the same transaction), and is dropped (removed).
pub(super) fn tomb_fired(tombs: &mut Armed, name: &str) -> bool {
    tombs
        .remove(name)
        .and_then(|mut watch| crate::util::poll_now(watch.as_mut()))
        .is_some_and(|event| event.event_type == EventType::NodeCreated)
}

/// A watch set on a node ahead, still to fire.
pub(super) type ArmedWatch =
    std::pin::Pin<Box<dyn std::future::Future<Output = zookeeper_client::WatchedEvent> + Send>>;

/// A waiter's watches still to fire, by node name: a few (the node it waits on, the one ahead
/// of it, a lock delay's holders), kept in a list, not a map: a waiter keeps them for as long
/// as it waits, and a map's table costs several times a list's room for one or two (memory
/// per queued waiter, `tests/memory.rs`).
#[derive(Default)]
pub(super) struct Armed(Vec<(String, ArmedWatch)>);

impl Armed {
    pub fn contains_key(&self, name: &str) -> bool {
        self.0.iter().any(|(n, _)| n == name)
    }

    pub fn get_mut(&mut self, name: &str) -> Option<&mut ArmedWatch> {
        self.0.iter_mut().find(|(n, _)| n == name).map(|(_, watch)| watch)
    }

    /// Keeps `watch` for `name`, in place of the one kept for it, if any.
    pub fn insert(&mut self, name: String, watch: ArmedWatch) {
        match self.get_mut(&name) {
            Some(kept) => *kept = watch,
            None => {
                // Room for one more, not the four a first push makes room for.
                self.0.reserve_exact(1);
                self.0.push((name, watch));
            }
        }
    }

    pub fn remove(&mut self, name: &str) -> Option<ArmedWatch> {
        let at = self.0.iter().position(|(n, _)| n == name)?;
        Some(self.0.swap_remove(at).1)
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&String, &mut ArmedWatch) -> bool) {
        self.0.retain_mut(|(name, watch)| keep(name, watch));
    }

    pub fn drain(&mut self) -> impl Iterator<Item = (String, ArmedWatch)> + '_ {
        self.0.drain(..)
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }
}

/// Why a waiter woke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Woke {
    /// The watched node at this index was deleted (or was gone when we went to watch it).
    Deleted(usize),
    /// The data of the watched node at this index changed; `None`: a change seen otherwise,
    /// or the watch could not be set. Look again.
    Changed(Option<usize>),
}

/// Runs `fut` while our own node stands: its deletion or the session's end ends the wait with
/// an error, a change of its data re-arms the watch (noting a revocation request). Our own
/// node's event is looked at first: when both have fired, it came first (see `wait_turn`).
pub(super) async fn while_ours_stands<F: std::future::Future>(
    entry: &mut Entry,
    fut: F,
) -> Result<F::Output> {
    tokio::pin!(fut);
    loop {
        tokio::select! {
            biased;
            event = entry.own_event() => match event {
                OwnEvent::Deleted => return Err(entry.gone()),
                OwnEvent::Session(state) => return Err(session_error(state)),
                OwnEvent::Changed => Box::pin(entry.watch_self()).await?,
            },
            out = &mut fut => return Ok(out),
        }
    }
}
