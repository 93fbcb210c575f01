//! Reading lock queues without joining them: who holds and who waits in every queue under a
//! root, and the cycles of sessions that wait for each other (deadlocks).
//!
//! ZooKeeper records the session that owns each queue node (`ephemeralOwner`), so the wait-for
//! graph between sessions can be read from the tree: a waiting node's session waits for the
//! sessions of the nodes it queues behind, per the recipe's own admission rule (the rule the
//! recipes here use, which is Curator's and kazoo's). Any of this crate's recipes, Curator's
//! and kazoo's node names are recognised.
//!
//! ```no_run
//! # async fn demo(session: zk_recipes::Session) -> zk_recipes::Result<()> {
//! use zk_recipes::inspect::{inspect, InspectOptions};
//! let found = inspect(&session, "/locks", &InspectOptions::new()).await?;
//! for cycle in &found.cycles {
//!     eprintln!("deadlock between sessions {:x?} in {:?}", cycle.sessions(), cycle.paths());
//! }
//! eprintln!("{} queues, {} nodes read", found.queues.len(), found.nodes_read);
//! # Ok(()) }
//! ```
//!
//! **What a cycle means.** Each session in it waits for the next (and the last for the
//! first), and none of them can proceed as things stand: a semaphore's waiter needs only one
//! holder to leave, so a cycle through one holder is reported only when every holder is stuck
//! too. A party is taken as one that releases nothing until it has all it waits for:
//! two independent tasks sharing one session (one holds L1, another waits for L2) look like
//! one that holds L1 and waits for L2.
//!
//! **Reads only.** Nothing is created, changed or deleted. The reads are not one snapshot
//! (a tree is read a batch at a time), so a cycle found is read again, its queues alone, and
//! reported only if it is still there with the same nodes: a deadlock stays; a passing queue
//! moves on.
//!
//! **Not seen.** A semaphore whose maximum is not the path's data (Curator's own keeps it
//! elsewhere) has every lease counted as held; kazoo's `Semaphore` and Curator's
//! `InterProcessSemaphoreMutex` keep their leases without a queue order, and are seen only
//! through their internal lock queue.
//!
//! **Parties.** Sessions whose nodes carry [`crate::Party`] evidence that ties them (the same
//! [`crate::LockOptions::owner`] label; a node taken inside another session's hold; a hold for
//! a parent process and another contender of that parent) are one party, and the graph is
//! between parties: [`CycleStep::party`] lists a party's sessions and
//! [`CycleStep::evidence`] what tied them.

mod cycles;
mod graph;
mod kinds;
mod parties;
mod report;
mod walk;

use std::collections::BTreeSet;

pub use self::report::{
    Cycle, CycleStep, InspectOptions, Inspection, QueueInfo, QueueKind, Skipped, WaitEdge,
};
use self::walk::Found;
use crate::error::Result;
use crate::path::LockPath;
use crate::session::Session;

/// Reads every lock queue at or under `root` (`/` for the whole tree, less `/zookeeper`) and
/// finds the cycles of sessions waiting for each other. Reads at most
/// [`InspectOptions::max_nodes`] nodes, and says how many it read. Never writes.
///
/// # Errors
/// [`crate::Error::InvalidPath`] for a bad root; [`crate::Error::SessionClosed`]; any error of
/// a read ([`crate::Error::ConnectionLoss`], [`crate::Error::NoAuth`], ...): call again.
///
/// # Cancel safety
/// Cancel-safe: it only reads.
pub async fn inspect(session: &Session, root: &str, options: &InspectOptions) -> Result<Inspection> {
    if root != "/" {
        LockPath::new(root)?;
    }
    let conn = session.shared().wait_conn().await?;
    let walk = walk::walk(&conn.client, root, options.max_nodes).await?;
    let queues = assemble(walk.queues);
    let parties =
        parties::parties(queues.iter().flat_map(|q| q.members.iter().map(|m| (q.path.as_str(), m))));
    let found = graph::analyse(&models(&queues, &parties), options.max_cycles);
    let mut inspection = Inspection {
        root: root.to_string(),
        root_exists: walk.root_exists,
        queues: Vec::new(),
        skipped: walk.skipped,
        nodes_read: walk.nodes_read,
        truncated: walk.truncated,
        cycles: Vec::new(),
        cycles_truncated: false,
        stuck_sessions: Vec::new(),
    };
    if !found.cycles.is_empty() {
        let confirmed = confirm(&conn.client, &queues, &parties, found, options.max_cycles).await?;
        inspection.cycles = confirmed.cycles;
        inspection.cycles_truncated = confirmed.truncated;
        inspection.stuck_sessions = confirmed.stuck_sessions;
    }
    tracing::debug!(
        root,
        queues = queues.len(),
        nodes_read = inspection.nodes_read,
        cycles = inspection.cycles.len(),
        "inspected"
    );
    inspection.queues = queues.into_iter().map(|q| q.info).collect();
    Ok(inspection)
}

/// The cycles of a first reading that a second one confirms.
#[derive(Default)]
struct Confirmed {
    cycles: Vec<Cycle>,
    truncated: bool,
    stuck_sessions: Vec<i64>,
}

/// Confirms the cycles `found` in `queues`: the queues of the stuck sessions, read again,
/// alone; a cycle is kept when it is found again on nodes that were there the first time
/// (same path, name and czxid), so that a queue that moved between the readings is not a
/// deadlock.
async fn confirm(
    client: &zookeeper_client::Client,
    queues: &[Assembled],
    parties: &parties::Parties,
    found: graph::Found,
    max_cycles: usize,
) -> Result<Confirmed> {
    let stuck: BTreeSet<i64> = found.stuck.iter().copied().collect();
    let paths: Vec<String> = queues
        .iter()
        .filter(|q| q.members.iter().any(|m| stuck.contains(&parties.of(m.session))))
        .map(|q| q.path.clone())
        .collect();
    let seen: BTreeSet<(&str, &str, i64)> = queues
        .iter()
        .flat_map(|q| q.members.iter().map(move |m| (q.path.as_str(), m.node.as_str(), m.czxid)))
        .collect();
    let again = assemble(walk::reread(client, &paths).await?);
    let confirmed = graph::analyse(&models(&again, parties), max_cycles);
    let unchanged = |c: &Cycle| {
        c.steps.iter().flat_map(|s| &s.edges).all(|e| {
            let member = |node: &str| {
                again
                    .iter()
                    .find(|q| q.path == e.path)
                    .and_then(|q| q.members.iter().find(|m| m.node == node))
            };
            [&e.waiter_node, &e.blocker_node]
                .iter()
                .all(|n| member(n).is_some_and(|m| seen.contains(&(e.path.as_str(), n.as_str(), m.czxid))))
        })
    };
    let cycles: Vec<Cycle> =
        confirmed.cycles.iter().map(|c| cycle(&again, parties, c)).filter(unchanged).collect();
    if cycles.is_empty() {
        return Ok(Confirmed::default());
    }
    Ok(Confirmed {
        cycles,
        truncated: confirmed.truncated,
        stuck_sessions: parties.all(confirmed.stuck.into_iter().filter(|s| stuck.contains(s))),
    })
}

/// A queue as reported, with what the graph needs.
struct Assembled {
    info: QueueInfo,
    nodes: Vec<crate::naming::QueueNode<'static>>,
}

impl std::ops::Deref for Assembled {
    type Target = QueueInfo;

    fn deref(&self) -> &QueueInfo {
        &self.info
    }
}

/// Each queue read, with its holders marked by its rule.
fn assemble(found: Vec<Found>) -> Vec<Assembled> {
    found
        .into_iter()
        .map(|f| {
            let held = graph::admitted(f.kind, &f.nodes);
            let mut members = f.members;
            for (i, m) in members.iter_mut().enumerate() {
                m.is_holder = i < held;
            }
            Assembled {
                info: QueueInfo { path: f.path, kind: f.kind, format: f.format, members },
                nodes: f.nodes,
            }
        })
        .collect()
}

/// The graph's queues, each node owned by its session's party.
fn models(queues: &[Assembled], parties: &parties::Parties) -> Vec<graph::Queue> {
    queues
        .iter()
        .map(|q| graph::Queue {
            kind: q.kind,
            nodes: q.nodes.clone(),
            owners: q
                .members
                .iter()
                .map(|m| if m.session == 0 { 0 } else { parties.of(m.session) })
                .collect(),
        })
        .collect()
}

/// A cycle of the graph (between parties), told with the queues' names and ids.
fn cycle(queues: &[Assembled], parties: &parties::Parties, steps: &[(i64, Vec<graph::Wait>)]) -> Cycle {
    let steps = steps
        .iter()
        .enumerate()
        .map(|(k, (session, waits))| CycleStep {
            session: *session,
            waits_for: steps[(k + 1) % steps.len()].0,
            party: parties.sessions(*session),
            evidence: parties.evidence(*session),
            edges: waits
                .iter()
                .map(|w| {
                    let queue = &queues[w.queue];
                    let (waiter, blocker) = (&queue.members[w.waiter], &queue.members[w.blocker]);
                    WaitEdge {
                        waiter_session: waiter.session,
                        blocker_session: blocker.session,
                        path: queue.path.clone(),
                        waiter_node: waiter.node.clone(),
                        waiter_id: waiter.id.clone(),
                        blocker_node: blocker.node.clone(),
                        blocker_id: blocker.id.clone(),
                        blocker_holds: blocker.is_holder,
                    }
                })
                .collect(),
        })
        .collect();
    Cycle { steps }
}
