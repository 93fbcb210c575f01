//! The watches a waiter sets on the nodes ahead of it, and on its own node while it waits.

use std::sync::Arc;

use zookeeper_client::{Error as ZkError, EventType};

use super::entry::Entry;
use super::events::Progress;
use super::own_watch::OwnEvent;
use super::sender::Sender;
use super::stats::Count;
use super::{session_error, Queue};
use crate::error::{Error, Result};

impl Queue {
    /// Sets a waiting round's watches: on the nodes named in `watching` (kept in `armed`), and on
    /// the tombstone named there (in `tombs`), before the nodes; reports the wait (`report`)
    /// once they are set. `Some(woke)` when we know already that we must look again: a node is
    /// gone, the connection was lost, or a node's data changed after our node was created (and
    /// after the last change we already looked again for, kept in `seen`: a change made between
    /// our listing and our watch would be missed by the watch). `None`: wait for the watches
    /// ([`Queue::until_fired`]). The tombstone's watch never wakes us: its creation comes just
    /// before its node's deletion, which does (see `Queue::tombstones`).
    ///
    /// Its caller boxes it while it runs: a waiter keeps none of it while it waits.
    pub(super) async fn arm_round(
        &self,
        entry: &mut Entry,
        watching: Watching<'_>,
        seen: &mut Seen,
        (armed, tombs): (&mut Armed, &mut Armed),
        report: Option<Report>,
        progress: &mut Progress<'_>,
    ) -> Result<Option<Woke>> {
        let names = watching.names;
        let conn = entry.conn().clone();
        let sender = Sender::new(&conn, &self.root);
        // A watch we no longer need is dropped (removed); one we still need is kept as it is:
        // it has seen every change since it was set.
        armed.retain(|name, _| names.contains(name));
        tombs.retain(|name, _| Some(name) == watching.tomb_for());
        // The tombstone's exists watch goes first: its creation, if it comes, is then reported
        // before the node's deletion, or before the answer that finds the node gone.
        let tomb = watching.tomb_for().filter(|name| !tombs.contains_key(name)).map(|name| {
            let path = crate::markers::tombstone_of(&self.root.child(name));
            (name, sender.watch_tomb(&path))
        });
        let paths: Vec<String> = names.iter().map(|n| self.root.child(n)).collect();
        // Sent back to back, answered in order.
        let requests: Vec<_> = names
            .iter()
            .zip(&paths)
            .map(|(name, path)| (!armed.contains_key(name)).then(|| sender.watch_ahead(path)))
            .collect();
        // The head's participant id, for a report: read behind the watches.
        let head = report.as_ref().map(|(_, _, head)| sender.read(&self.root.child(head)));
        if let Some((name, request)) = tomb {
            arm_tomb(tombs, name, request.await);
        }
        let changed = match arm_watches(requests, (names, &paths), seen, armed, entry.czxid()).await? {
            Ok(changed) => changed,
            Err(woke) => return Ok(Some(woke)),
        };
        if let (Some((first, ahead, _)), Some(head)) = (report, head) {
            let holder = head.await.ok().map(|(data, _)| crate::naming::split_data(&data).0);
            // Reported once we watch: whatever the caller does on hearing it, we will see.
            self.report_wait(entry.name(), progress, (first, ahead), holder, &names[0]);
        }
        Ok(changed.then_some(Woke::Changed(None)))
    }

    /// Waits until one of the watches set on the nodes `names` (in `armed`, see
    /// [`Queue::arm_round`]) fires, while our own node stands.
    pub(super) async fn until_fired(
        &self,
        entry: &mut Entry,
        armed: &mut Armed,
        names: &[Arc<str>],
    ) -> Result<Woke> {
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

/// What a wait reports once its watches are set: whether it is the first of its attempt, how
/// many nodes are ahead, and the head's name.
pub(super) type Report = (bool, usize, String);

/// Per watched node (by path), the latest data change a waiter has accounted for: a few at
/// most, in a list.
pub(super) type Seen = Vec<(String, i64)>;

/// Reads the answers to the data watches sent on the nodes `names` (at `paths`; `None`: kept
/// from an earlier round), keeping each set one in `armed`. `Ok(Ok(changed))` once all are
/// set: whether a node's data changed after our node was created (`czxid`) and after the last
/// change accounted for in `seen`. `Ok(Err(woke))` when a node was gone, or the connection
/// lost (the watches are set again by looking again once the client is back).
async fn arm_watches<F>(
    requests: Vec<Option<F>>,
    (names, paths): (&[Arc<str>], &[String]),
    seen: &mut Seen,
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
                let noted = seen.iter().position(|(seen, _)| seen == path);
                let accounted = noted.map_or(czxid, |i| seen[i].1);
                if stat.mzxid > stat.czxid && stat.mzxid > accounted {
                    match noted {
                        Some(i) => seen[i].1 = stat.mzxid,
                        None => seen.push((path.clone(), stat.mzxid)),
                    }
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
    name: &Arc<str>,
    answer: std::result::Result<(Option<zookeeper_client::Stat>, zookeeper_client::OneshotWatcher), ZkError>,
) {
    match answer {
        // Nothing of that name: the watch waits for its creation.
        Ok((None, watcher)) => {
            tombs.insert(name.clone(), Box::pin(watcher.changed()));
        }
        // A node of that name stands (nothing of ours makes one that lasts): its watch would
        // never tell a creation. Dropped; we list when the node goes.
        Ok((Some(_), _)) => tracing::debug!(node = &**name, "a node stands at a tombstone's name"),
        // Without the watch, we list when the node goes.
        Err(e) => tracing::debug!(node = &**name, error = %e, "could not watch a tombstone"),
    }
}

/// The first of the watches in `armed` on `names` to fire, with its index in `names`; spent,
/// it is removed.
fn first_fired<'a>(
    armed: &'a mut Armed,
    names: &'a [Arc<str>],
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
/// and, when `tomb`, the tombstone of the first (then the node just ahead) too.
#[derive(Clone, Copy)]
pub(super) struct Watching<'a> {
    pub names: &'a [Arc<str>],
    pub tomb: bool,
}

impl<'a> Watching<'a> {
    /// The node whose tombstone is watched, if any.
    fn tomb_for(self) -> Option<&'a Arc<str>> {
        self.names.first().filter(|_| self.tomb)
    }
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
/// per queued waiter, `tests/memory.rs`). The names are the waiting round's, shared.
#[derive(Default)]
pub(super) struct Armed(Vec<(Arc<str>, ArmedWatch)>);

impl Armed {
    pub fn contains_key(&self, name: &str) -> bool {
        self.0.iter().any(|(n, _)| **n == *name)
    }

    pub fn get_mut(&mut self, name: &str) -> Option<&mut ArmedWatch> {
        self.0.iter_mut().find(|(n, _)| **n == *name).map(|(_, watch)| watch)
    }

    /// Keeps `watch` for `name`, in place of the one kept for it, if any.
    pub fn insert(&mut self, name: Arc<str>, watch: ArmedWatch) {
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
        let at = self.0.iter().position(|(n, _)| **n == *name)?;
        Some(self.0.swap_remove(at).1)
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&Arc<str>, &mut ArmedWatch) -> bool) {
        self.0.retain_mut(|(name, watch)| keep(name, watch));
    }

    pub fn drain(&mut self) -> impl Iterator<Item = (Arc<str>, ArmedWatch)> + '_ {
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
