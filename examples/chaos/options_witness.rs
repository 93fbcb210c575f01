//! The `delay` phase's witness: a session of the orchestrator's own, straight to the ensemble
//! (no fault proxy), that lists the lock path on every change of its children (each listing
//! after a `sync`, kept with the sync's send time) and watches each node's data, to tell how it
//! went: with a data change first (a marked release: the marker and the delete are one
//! transaction) or deleted outright (an expiry, a hold limit). A node gone before its watch was
//! set is not judged.
//!
//! It also records its own session's states (`OptHistory::witness_conns`): a node deleted while
//! its connection was down is reported deleted on the reconnection (ZooKeeper sets the data
//! watch again on a node that is gone: `NodeDeleted`), whether or not a marked release's data
//! change came first in the same transaction. The checker does not judge those verdicts.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use zk_recipes::zookeeper_client::{Client, EventType};
use zk_recipes::Session;

use crate::options_check::Gone;
use crate::resource::{Epoch, History};

/// Follows `path` until aborted, recording into `state`'s option history.
pub async fn run(connect: String, path: &'static str, state: Arc<Mutex<History>>, epoch: Epoch) {
    let Ok(session) = crate::sasl::connect(&connect, Duration::from_secs(10)).await else { return };
    // Ends with this future (the run is aborted at the phase's end).
    let _states = AbortOnDrop(tokio::spawn(record_states(session.clone(), state.clone(), epoch)));
    let mut watched = std::collections::HashSet::new();
    loop {
        let Ok(client) = session.client() else {
            let _ = session.states().changed().await;
            continue;
        };
        // `sync` first: the server this session reads from may lag the leader (a follower
        // catching up after a restart), and a lagging listing would show a node the leader had
        // already deleted, dated later than its end. After a sync, a node listed existed when
        // the leader handled the sync, so no earlier than its send time: the listing's date.
        let sent = epoch.now();
        // (An error here is the connection's: the listing below meets it too.)
        let _ = client.sync(path).await;
        let (children, watcher) = match client.list_and_watch_children(path).await {
            Ok(listed) => listed,
            Err(_) => {
                // Not created yet (await its creation), or the connection is down (await the
                // session's next state).
                match client.check_and_watch_stat(path).await {
                    Ok((None, created)) => drop(created.changed().await),
                    Ok((Some(_), _)) => {}
                    Err(_) => drop(session.states().changed().await),
                }
                continue;
            }
        };
        for node in &children {
            if watched.insert(node.clone()) {
                tokio::spawn(judge(
                    client.clone(),
                    format!("{path}/{node}"),
                    node.clone(),
                    state.clone(),
                    epoch,
                ));
            }
        }
        state.lock().unwrap_or_else(|e| e.into_inner()).opts.listings.push((sent, children));
        watcher.changed().await;
    }
}

/// Watches one node's data and records how it went.
async fn judge(client: Client, full: String, node: String, state: Arc<Mutex<History>>, epoch: Epoch) {
    let Ok((_, _, watcher)) = client.get_and_watch_data(&full).await else { return };
    let gone = match watcher.changed().await.event_type {
        EventType::NodeDataChanged => Gone::Clean,
        EventType::NodeDeleted => Gone::Unclean,
        _ => return,
    };
    state.lock().unwrap_or_else(|e| e.into_inner()).opts.gone.insert(node, (gone, epoch.now()));
}

/// Records every state of the witness's session, and when (`OptHistory::witness_conns`), in
/// order: each change, not only the latest (a short `Suspended` must show). Falling behind
/// counts as a gap (`Lagged`) until the next state.
async fn record_states(session: Session, state: Arc<Mutex<History>>, epoch: Epoch) {
    let mut events = session.events();
    let push =
        |s: String| state.lock().unwrap_or_else(|e| e.into_inner()).opts.witness_conns.push((s, epoch.now()));
    let first = *session.states().borrow();
    push(format!("{:?}-{}", first.state, first.generation));
    loop {
        match events.recv().await {
            Ok(s) => push(format!("{:?}-{}", s.state, s.generation)),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => push("Lagged-0".into()),
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Aborts its task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
