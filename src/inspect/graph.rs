//! The wait-for graph between sessions, and its cycles. Pure: it sees sorted queues and their
//! nodes' owners, applies each recipe's own admission rule, and does no I/O.
//!
//! **Edges.** A waiting node's session waits for the session of every node it queues behind,
//! per the rule: a lock's waiter for everyone ahead, a reader for the writers ahead, a writer
//! for everyone ahead, a semaphore's waiter for everyone ahead (the holders until enough leases
//! are free, the waiters ahead because the queue is first in, first out). Those sets grow with
//! the queue, so the graph keeps, for each waiter, the nearest of them that stand for the rest:
//! a lock's waiter the node just ahead (which itself waits for everything ahead of it), a
//! reader the nearest writer ahead, a writer every node back to the previous waiting writer, a
//! semaphore's first waiter every holder and a later one the waiter just ahead. What a session
//! waits for, directly or through others, is exactly what it reaches in this graph, with edges
//! in proportion to the nodes. A session never waits for itself: its own nodes ahead are
//! another task of the same process, or a reentrant hold (no self-loops).
//!
//! **Deadlock.** A semaphore's waiter needs any one holder to leave, not all of them, so a
//! cycle through one holder is no deadlock while another holder is free to leave. A cycle is
//! reported only among the sessions that can never proceed, found by letting every session
//! that could finish do so (remove its nodes, as its releases would) until none can: what is
//! left is stuck, and the cycles are those of the graph of what is left. A session finishes
//! when every node of it is admitted (it holds all it waits for; or waits only behind its own).

use std::collections::{BTreeMap, BTreeSet};

use super::cycles::{elementary, in_cycles, reaching, Graph};
use super::report::QueueKind;
use crate::markers::WRITER;
use crate::naming::QueueNode;
use crate::queue::{Admission, Decision, FirstN};
use crate::recipes::{RwRule, Weighted};

/// At most this many nodes of evidence are kept per pair of sessions.
const EVIDENCE: usize = 3;

/// One queue: its kind, its nodes in queue order, and each node's owner session.
pub(crate) struct Queue {
    pub kind: QueueKind,
    pub nodes: Vec<QueueNode<'static>>,
    pub owners: Vec<i64>,
}

/// One wait: node `waiter` of queue `queue` queues behind node `blocker` (indexes into
/// [`Queue::nodes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Wait {
    pub queue: usize,
    pub waiter: usize,
    pub blocker: usize,
}

/// What the analysis found.
#[derive(Debug, Default)]
pub(crate) struct Found {
    /// Each cycle: its sessions in order, each with the waits on the next (the last's on the
    /// first).
    pub cycles: Vec<Vec<(i64, Vec<Wait>)>>,
    pub truncated: bool,
    /// Every session that can never proceed.
    pub stuck: Vec<i64>,
}

/// The rule of a kind of queue: the recipe's own.
fn rule(kind: QueueKind) -> Box<dyn Admission> {
    match kind {
        QueueKind::Lock | QueueKind::Election => Box::new(FirstN(1)),
        QueueKind::ReadWrite => Box::new(RwRule),
        QueueKind::Semaphore { max_leases: Some(max) } => Box::new(Weighted { max: u64::from(max) }),
        // No maximum known: nobody is known to wait.
        QueueKind::Semaphore { max_leases: None } => Box::new(FirstN(usize::MAX)),
    }
}

/// How many nodes at the front the rule admits. Every rule here admits a prefix of the queue
/// (a lock its head; readers up to the first writer, or a writer at the head; leases in order
/// while they fit), so the first one refused ends it.
pub(crate) fn admitted(kind: QueueKind, nodes: &[QueueNode]) -> usize {
    let rule = rule(kind);
    (0..nodes.len()).find(|&i| rule.decide(nodes, i) != Decision::Proceed).unwrap_or(nodes.len())
}

/// The waits of one queue (`nodes` in order, `held` admitted at the front), as pairs
/// (waiter, blocker) of indexes: see the module's note on which are kept.
fn waits(kind: QueueKind, nodes: &[QueueNode], held: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut last_writer = None;
    let mut last_waiting_writer = None;
    for (i, node) in nodes.iter().enumerate() {
        let writer = kind == QueueKind::ReadWrite && node.marker == WRITER;
        if i >= held {
            match kind {
                QueueKind::ReadWrite if writer => {
                    let from = last_waiting_writer.unwrap_or(0);
                    out.extend((from..i).map(|j| (i, j)));
                }
                QueueKind::ReadWrite => out.extend(last_writer.map(|j| (i, j))),
                QueueKind::Semaphore { .. } if i == held => out.extend((0..held).map(|j| (i, j))),
                _ => out.push((i, i - 1)),
            }
        }
        if writer {
            last_writer = Some(i);
            if i >= held {
                last_waiting_writer = Some(i);
            }
        }
    }
    out
}

/// The graph between the sessions of the nodes `live` (per queue, indexes into its nodes, in
/// order).
fn graph(queues: &[Queue], live: &[Vec<usize>]) -> Graph<Vec<Wait>> {
    let mut graph: Graph<Vec<Wait>> = BTreeMap::new();
    for (q, (queue, live)) in queues.iter().zip(live).enumerate() {
        let nodes: Vec<QueueNode> = live.iter().map(|&i| queue.nodes[i].clone()).collect();
        let held = admitted(queue.kind, &nodes);
        for (w, b) in waits(queue.kind, &nodes, held) {
            let (waiter, blocker) = (live[w], live[b]);
            let (from, to) = (queue.owners[waiter], queue.owners[blocker]);
            // No self-loops; a node without a session (persistent) waits for nothing.
            if from == to || from == 0 {
                continue;
            }
            let evidence = graph.entry(from).or_default().entry(to).or_default();
            if evidence.len() < EVIDENCE {
                evidence.push(Wait { queue: q, waiter, blocker });
            }
        }
    }
    graph
}

/// Whether each live node of queue `q` is fine for its session's finishing: admitted, or
/// waiting only behind nodes of its own session that are fine.
fn fine(queue: &Queue, live: &[usize]) -> Vec<bool> {
    let nodes: Vec<QueueNode> = live.iter().map(|&i| queue.nodes[i].clone()).collect();
    let held = admitted(queue.kind, &nodes);
    let mut ok: Vec<bool> = (0..live.len()).map(|i| i < held).collect();
    let mut blockers: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (w, b) in waits(queue.kind, &nodes, held) {
        blockers.entry(w).or_default().push(b);
    }
    for (w, bs) in blockers {
        let owner = queue.owners[live[w]];
        ok[w] = bs.iter().all(|&b| queue.owners[live[b]] == owner && ok[b]);
    }
    ok
}

/// Finds the stuck sessions and the cycles among them (at most `max_cycles`).
pub(crate) fn analyse(queues: &[Queue], max_cycles: usize) -> Found {
    let mut live: Vec<Vec<usize>> = queues.iter().map(|q| (0..q.nodes.len()).collect()).collect();
    let first = graph(queues, &live);
    let cyclic = in_cycles(&first);
    if cyclic.is_empty() {
        return Found::default();
    }
    // Whoever reaches no cycle finishes (by induction along what it waits for): at once. A
    // node without a session (persistent, made by hand) never leaves.
    let mut left = reaching(&first, &cyclic);
    left.insert(0);
    let prune = |live: &mut Vec<Vec<usize>>, left: &BTreeSet<i64>| {
        for (queue, live) in queues.iter().zip(live.iter_mut()) {
            live.retain(|&i| left.contains(&queue.owners[i]));
        }
    };
    prune(&mut live, &left);
    // Then, round after round, whoever holds all it waits for.
    loop {
        let mut blocked = BTreeSet::from([0]);
        for (queue, live) in queues.iter().zip(&live) {
            for (i, ok) in fine(queue, live).into_iter().enumerate() {
                if !ok {
                    blocked.insert(queue.owners[live[i]]);
                }
            }
        }
        let before = left.len();
        left.retain(|s| blocked.contains(s));
        if left.len() == before {
            break;
        }
        prune(&mut live, &left);
    }
    left.remove(&0);
    let (cycles, truncated) = elementary(&graph(queues, &live), max_cycles);
    Found { cycles, truncated, stuck: left.into_iter().collect() }
}

#[cfg(test)]
mod tests {
    use super::*;

    const READ: usize = 0;

    fn queue(kind: QueueKind, members: &[(usize, i64)]) -> Queue {
        let nodes = members
            .iter()
            .enumerate()
            .map(|(i, &(marker, _))| QueueNode {
                name: format!("_c_u-w1-lease-{i:010}").into(),
                seq: i as i32,
                marker,
            })
            .collect();
        Queue { kind, nodes, owners: members.iter().map(|&(_, owner)| owner).collect() }
    }

    fn lock(owners: &[i64]) -> Queue {
        queue(QueueKind::Lock, &owners.iter().map(|&o| (0, o)).collect::<Vec<_>>())
    }

    fn semaphore(max: u32, owners: &[i64]) -> Queue {
        queue(
            QueueKind::Semaphore { max_leases: Some(max) },
            &owners.iter().map(|&o| (0, o)).collect::<Vec<_>>(),
        )
    }

    fn cycles(found: &Found) -> Vec<Vec<i64>> {
        found.cycles.iter().map(|c| c.iter().map(|(s, _)| *s).collect()).collect()
    }

    #[test]
    fn two_sessions_holding_what_the_other_waits_for() {
        // A (1) holds L1 and waits for L2; B (2) holds L2 and waits for L1.
        let found = analyse(&[lock(&[1, 2]), lock(&[2, 1])], 10);
        assert_eq!(cycles(&found), [vec![1, 2]]);
        assert_eq!(found.stuck, [1, 2]);
        // The evidence: A's node 1 of L2 queues behind B's node 0; B's node 1 of L1 behind A's.
        assert_eq!(found.cycles[0][0].1, [Wait { queue: 1, waiter: 1, blocker: 0 }]);
        assert_eq!(found.cycles[0][1].1, [Wait { queue: 0, waiter: 1, blocker: 0 }]);
    }

    #[test]
    fn three_sessions_through_a_read_write_lock_and_a_semaphore() {
        // A (1) writes RW and waits for a lease of S (one lease, B's); B (2) waits for M, which
        // C (3) holds; C waits to read RW, behind A's write.
        let rw = queue(QueueKind::ReadWrite, &[(WRITER, 1), (READ, 3)]);
        let found = analyse(&[rw, semaphore(1, &[2, 1]), lock(&[3, 2])], 10);
        assert_eq!(cycles(&found), [vec![1, 2, 3]]);
        assert_eq!(found.stuck, [1, 2, 3]);
    }

    #[test]
    fn a_session_never_waits_for_itself() {
        // Two nodes of one session in one queue: another task of the same process.
        let own = analyse(&[lock(&[1, 1]), lock(&[1, 1, 1])], 10);
        assert!(own.cycles.is_empty() && own.stuck.is_empty(), "{own:?}");
        assert!(graph(&[lock(&[1, 1])], &[vec![0, 1]]).is_empty(), "no self-loop");
        // But behind its own second node, B still waits for A: a real cycle.
        let found = analyse(&[lock(&[1, 1, 2]), lock(&[2, 1])], 10);
        assert_eq!(cycles(&found), [vec![1, 2]]);
    }

    #[test]
    fn a_long_queue_and_a_long_chain_have_no_cycle() {
        let long: Vec<i64> = (1..=5000).collect();
        let found = analyse(&[lock(&long)], 10);
        assert!(found.cycles.is_empty() && found.stuck.is_empty());
        // Session k holds L_k and waits for L_k+1; the last waits for nothing.
        let chain: Vec<Queue> =
            (1..=500).map(|k| lock(&if k == 1 { vec![1] } else { vec![k, k - 1] })).collect();
        let found = analyse(&chain, 10);
        assert!(found.cycles.is_empty() && found.stuck.is_empty());
    }

    #[test]
    fn a_semaphore_waiter_needs_only_one_holder_to_leave() {
        // S has two leases, A's (1) and B's (2); C (3) waits for one. A waits for M, which C
        // holds: A and C wait for each other, but B is free to leave, and then C gets a lease.
        let found = analyse(&[semaphore(2, &[1, 2, 3]), lock(&[3, 1])], 10);
        assert!(found.cycles.is_empty() && found.stuck.is_empty(), "{found:?}");
        // When B waits too (behind A at M), nobody can leave: both cycles.
        let found = analyse(&[semaphore(2, &[1, 2, 3]), lock(&[3, 1, 2])], 10);
        assert_eq!(cycles(&found), [vec![1, 3], vec![1, 3, 2]]);
    }

    #[test]
    fn a_reader_waits_for_writers_only_and_a_writer_for_everyone() {
        // X (9) writes; readers B (2) then A (1) wait for it. B also waits at M behind A: a
        // reader does not wait for a reader ahead, so no cycle.
        let rw = queue(QueueKind::ReadWrite, &[(WRITER, 9), (READ, 2), (READ, 1)]);
        let found = analyse(&[rw, lock(&[1, 2])], 10);
        assert!(found.cycles.is_empty() && found.stuck.is_empty(), "{found:?}");
        // A writer M (4) waits behind a writer H (1) and two waiting readers R (2), S (3); R
        // waits at L2 behind M: once H leaves, R reads and M waits for R. A cycle.
        let rw = queue(QueueKind::ReadWrite, &[(WRITER, 1), (READ, 2), (READ, 3), (WRITER, 4)]);
        let found = analyse(&[rw, lock(&[4, 2])], 10);
        assert_eq!(cycles(&found), [vec![2, 4]]);
        assert_eq!(found.stuck, [2, 4]);
    }

    #[test]
    fn admission_follows_each_recipe() {
        let rw = queue(QueueKind::ReadWrite, &[(READ, 1), (READ, 2), (WRITER, 3), (READ, 4)]);
        assert_eq!(admitted(rw.kind, &rw.nodes), 2);
        assert_eq!(admitted(QueueKind::Lock, &lock(&[1, 2, 3]).nodes), 1);
        assert_eq!(
            admitted(QueueKind::Semaphore { max_leases: Some(2) }, &semaphore(2, &[1, 2, 3]).nodes),
            2
        );
        assert_eq!(admitted(QueueKind::Semaphore { max_leases: None }, &semaphore(2, &[1, 2, 3]).nodes), 3);
    }
}
