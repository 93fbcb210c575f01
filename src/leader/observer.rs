//! [`LeaderObserver`]: follows an election's leader without joining it.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::AbortHandle;
use zookeeper_client::Error as ZkError;

use crate::error::{Error, Result};
use crate::format::NodeFormat;
use crate::lock_core::{FirstN, LockCore, LockSpec, NameScheme, QueueStats};
use crate::markers::{LATCH, LOCK};
use crate::naming::split_data;
use crate::options::LockOptions;
use crate::session::Session;

/// How long the observer waits before it reads again after an error it can't act on (a refused
/// path, a denied read): a bound, not a way to wait for an event.
const RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// The leader of an election, as a [`LeaderObserver`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderInfo {
    /// The participant id stored in the leader's node (UTF-8, lossy): ours, Curator's
    /// `LeaderLatch` id, or kazoo's `Election` identifier.
    pub id: String,
    /// The leader's node name under the election path.
    pub node: String,
    /// The leader's fencing token: its node's `czxid`, the token its own latch or selector got.
    pub fencing_token: u64,
    /// The session that owns the leader's node (`ephemeralOwner`).
    pub session: i64,
    /// The value the leader proclaimed ([`crate::LeaderLatch::proclaim`]); empty if none.
    pub value: Vec<u8>,
}

/// Follows the leader of an election on a path without joining it, as etcd's
/// `Election.Observe`: [`LeaderObserver::leader`] is a channel of the current leader (or `None`
/// while nobody leads), updated on every change.
///
/// * It reads the election as [`crate::LeaderLatch`] and [`crate::LeaderSelector`] queue, in
///   Curator's names (also Curator's `LeaderLatch` and `LeaderSelector`) or, with
///   [`NodeFormat::Kazoo`], kazoo's `Election`. (A selector queues with lock names: on a
///   mutex's path, the observer reports the mutex's holder.)
/// * [`LeaderInfo::value`] is what the leader proclaimed ([`crate::LeaderLatch::proclaim`],
///   [`crate::LeadershipContext::proclaim`]); the observer sees each proclaim (its data watch
///   on the leader's node fires).
/// * No herd: it keeps one watch on the server, on the leader's node (its deletion means the
///   next leader), or, only while nobody leads, one child watch on the election path.
/// * It follows its [`Session`] across expiries: after a new session it reads the election
///   again on the new one. It stops when the session is closed (the channel then shows `None`),
///   or when the observer is closed or its last clone dropped.
///
/// Clones share one observer.
///
/// ```no_run
/// # async fn demo(session: zk_recipes::Session) -> zk_recipes::Result<()> {
/// use zk_recipes::LeaderObserver;
/// let observer = LeaderObserver::new(&session, "/election/jobs")?;
/// let mut leader = observer.leader();
/// loop {
///     if let Some(info) = leader.borrow_and_update().clone() {
///         println!("{} leads (token {})", info.id, info.fencing_token);
///     }
///     if leader.changed().await.is_err() {
///         break; // the observer stopped
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LeaderObserver {
    inner: Arc<Inner>,
}

struct Inner {
    path: String,
    core: Arc<LockCore>,
    leader: watch::Receiver<Option<LeaderInfo>>,
    task: AbortHandle,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl std::fmt::Debug for LeaderObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderObserver")
            .field("path", &self.inner.path)
            .field("leader", &*self.inner.leader.borrow())
            .finish()
    }
}

impl LeaderObserver {
    /// Starts following the election on `path` in Curator's names. Must be called inside a
    /// Tokio runtime (the observer runs as a task on it), as [`crate::LeaderLatch::start`].
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for an invalid path.
    pub fn new(session: &Session, path: &str) -> Result<LeaderObserver> {
        Self::with_format(session, path, NodeFormat::default())
    }

    /// As [`LeaderObserver::new`], reading the election in `format`'s names
    /// ([`NodeFormat::Kazoo`] for kazoo's `Election`).
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for an invalid path.
    pub fn with_format(session: &Session, path: &str, format: NodeFormat) -> Result<LeaderObserver> {
        // A latch's nodes (`latch-`) or a selector's (`lock-`; kazoo's `Election` and a latch in
        // kazoo format are `__lock__`), first in sequence order leads. The observer never
        // creates anything.
        let markers: &'static [&'static str] = match format {
            NodeFormat::Curator => &[LATCH, LOCK],
            // In kazoo's names both are `__lock__` (two markers would read as a read/write lock).
            _ => &[LOCK],
        };
        let spec = LockSpec {
            recipe: "leader-observer",
            scheme: NameScheme::curator(markers),
            marker: LATCH,
            rule: Arc::new(FirstN(1)),
            reentrant: false,
            exclusive: false,
            root_data: None,
        };
        let core = Arc::new(LockCore::build(session, path, spec, &LockOptions::new().format(format))?);
        let (tx, rx) = watch::channel(None);
        let span = tracing::info_span!("leader_observer", path = %core.path());
        let task =
            tokio::spawn(tracing::Instrument::instrument(follow(core.clone(), tx), span)).abort_handle();
        Ok(LeaderObserver { inner: Arc::new(Inner { path: path.to_owned(), core, leader: rx, task }) })
    }

    /// The current leader, `None` while nobody leads, updated on every change (a new leader,
    /// none). The channel closes when the observer stops (closed, or its session closed).
    ///
    /// Its value is `None` until the observer's first read of the election; that first read
    /// always marks the channel changed (even if nobody leads), so a receiver taken before it
    /// can await `changed()` to know the first answer.
    pub fn leader(&self) -> watch::Receiver<Option<LeaderInfo>> {
        self.inner.leader.clone()
    }

    /// What following the election cost so far: [`QueueStats::listings`] counts the
    /// observer's reads of the election (one per leader change, proclaim or session change; two
    /// per change while nobody leads). Nothing else is counted.
    pub fn stats(&self) -> QueueStats {
        self.inner.core.stats()
    }

    /// Stops following (for every clone); the channel closes.
    pub fn close(&self) {
        self.inner.task.abort();
    }
}

/// What woke the observer.
enum Wake {
    /// Read the election again.
    Again,
    /// The session is closed.
    Closed,
}

/// The observer's task: read the queue, publish its first node, watch that one node (or the
/// path while nobody leads), read again when the watch fires or the session changes.
async fn follow(core: Arc<LockCore>, tx: watch::Sender<Option<LeaderInfo>>) {
    let session = core.session().clone();
    let mut states = session.states();
    // The first read always notifies, even if nobody leads: "nobody" is then an answer.
    let mut first = true;
    loop {
        states.borrow_and_update();
        let wake = match observe_once(&core, &session, &tx, &mut first).await {
            Ok(Some(watcher)) => tokio::select! {
                _ = watcher.changed() => Wake::Again,
                changed = states.changed() => if changed.is_err() { Wake::Closed } else { Wake::Again },
            },
            Ok(None) => Wake::Again,
            Err(Error::SessionClosed) => Wake::Closed,
            Err(Error::SessionExpired) => {
                // The session's next generation (awaited by the next read) brings a new client.
                Wake::Again
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the election; reading again");
                tokio::select! {
                    _ = tokio::time::sleep(RETRY_AFTER) => Wake::Again,
                    changed = states.changed() => if changed.is_err() { Wake::Closed } else { Wake::Again },
                }
            }
        };
        if matches!(wake, Wake::Closed) || session.is_closed() {
            tx.send_replace(None);
            return;
        }
    }
}

/// Reads the election once and publishes its leader; returns the one watch to wait on, or
/// `None` to read again at once (the node to watch was already gone).
async fn observe_once(
    core: &LockCore,
    session: &Session,
    tx: &watch::Sender<Option<LeaderInfo>>,
    first: &mut bool,
) -> Result<Option<zookeeper_client::OneshotWatcher>> {
    let publish = |leader: Option<LeaderInfo>, first: &mut bool| {
        if std::mem::take(first) {
            tx.send_replace(leader);
        } else {
            tx.send_if_modified(|now| {
                let changed = *now != leader;
                *now = leader;
                changed
            });
        }
    };
    let root = core.path().as_str();
    let mut leader = core.participants().await?.into_iter().find(|p| p.is_holder);
    let client = session.client()?;
    if leader.is_none() {
        // Nobody leads: one child watch on the path (or an existence watch on a missing path),
        // then read again, so a node created before the watch was set is not missed.
        let watcher = match client.get_and_watch_children(root).await {
            Ok((_, _, watcher)) => watcher,
            Err(ZkError::NoNode) => match client.check_and_watch_stat(root).await {
                Ok((None, watcher)) => watcher,
                Ok((Some(_), _)) => return Ok(None),
                Err(e) => return Err(Error::from_zk("exists", root, e)),
            },
            Err(e) => return Err(Error::from_zk("list", root, e)),
        };
        leader = core.participants().await?.into_iter().find(|p| p.is_holder);
        if leader.is_none() {
            publish(None, first);
            return Ok(Some(watcher));
        }
    }
    let Some(leader) = leader else { return Ok(None) };
    let node = core.path().child(&leader.node);
    // The data read with the watch, not the listing's: a proclaim in between is not missed.
    let (data, watcher) = match client.get_and_watch_data(&node).await {
        Ok((data, stat, watcher)) if stat.czxid == leader.czxid => (data, watcher),
        Ok(_) | Err(ZkError::NoNode) => return Ok(None),
        Err(e) => return Err(Error::from_zk("get", &node, e)),
    };
    let (id, value) = split_data(&data);
    let info = LeaderInfo {
        id,
        node: leader.node,
        fencing_token: leader.czxid as u64,
        session: leader.session,
        value,
    };
    publish(Some(info), first);
    Ok(Some(watcher))
}
