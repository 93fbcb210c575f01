//! What an inspection reports: the queues found under the root, and the cycles of sessions
//! that wait for each other. Plain data.

use crate::format::NodeFormat;
use crate::participants::Participant;

/// What kind of queue a path holds, as its node names say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QueueKind {
    /// One holder at a time: [`crate::InterProcessMutex`], [`crate::InterProcessSemaphoreMutex`],
    /// a leader selector, Curator's `InterProcessMutex`, kazoo's `Lock` (Curator's `lock-`
    /// names, or kazoo's `__lock__` alone).
    Lock,
    /// A leader latch (`latch-`): the first in line leads. It waits like a lock.
    Election,
    /// A read/write lock (Curator's `__READ__` and `__WRIT__`, kazoo's `__rlock__` and
    /// `__lock__`): a reader waits for the writers ahead of it, a writer for everyone ahead.
    ReadWrite,
    /// A semaphore's leases (`lease-`): up to `max_leases` held, first in, first out.
    /// `max_leases` is the path's data, as [`crate::InterProcessSemaphore`] stores it; `None`
    /// when it does not say (Curator's own semaphore keeps it elsewhere), and then every lease
    /// node counts as a holder and none as a waiter.
    Semaphore {
        /// The maximum the path's data gives, if it gives one.
        max_leases: Option<u32>,
    },
}

impl QueueKind {
    /// A short name: `lock`, `election`, `read/write lock` or `semaphore`.
    pub fn name(self) -> &'static str {
        match self {
            QueueKind::Lock => "lock",
            QueueKind::Election => "election",
            QueueKind::ReadWrite => "read/write lock",
            QueueKind::Semaphore { .. } => "semaphore",
        }
    }
}

/// One queue found under the root.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueInfo {
    /// The queue's path (its nodes' parent).
    pub path: String,
    /// What kind of queue it is.
    pub kind: QueueKind,
    /// Whose node names it uses.
    pub format: NodeFormat,
    /// Its nodes in queue order, with data, owner and whether the recipe's rule admits each
    /// now (`is_holder`).
    pub members: Vec<Participant>,
}

impl QueueInfo {
    /// The members the rule admits now.
    pub fn holders(&self) -> impl Iterator<Item = &Participant> {
        self.members.iter().filter(|m| m.is_holder)
    }

    /// How many members wait.
    pub fn waiters(&self) -> usize {
        self.members.iter().filter(|m| !m.is_holder).count()
    }
}

/// A path that looked like a queue but was not read as one, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Skipped {
    /// The path.
    pub path: String,
    /// Why: nodes of several recipes or of both formats on one path, or a wrapped sequence
    /// counter (no client can order that queue).
    pub reason: String,
}

/// One queue node that waits behind another: the evidence of one wait-for edge.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaitEdge {
    /// The waiting node's session (one of its step's [`CycleStep::party`]).
    pub waiter_session: i64,
    /// The session of the node it queues behind (one of the next step's party).
    pub blocker_session: i64,
    /// The queue's path.
    pub path: String,
    /// The waiting node's name.
    pub waiter_node: String,
    /// The participant id stored in the waiting node.
    pub waiter_id: String,
    /// The name of the node it queues behind.
    pub blocker_node: String,
    /// The participant id stored in that node.
    pub blocker_id: String,
    /// Whether that node is admitted now (it holds); otherwise it waits too, and goes first.
    pub blocker_holds: bool,
}

/// One step of a cycle: `session`'s party waits for `waits_for`'s, the next step's.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CycleStep {
    /// The waiting party, by its lowest session id (`ephemeralOwner` of its nodes): the
    /// session itself when it is a party alone.
    pub session: i64,
    /// The party it waits for, by its lowest session id.
    pub waits_for: i64,
    /// Every session of the waiting party, sorted: `[session]` when alone; more when the
    /// nodes' [`crate::Party`] evidence ties several sessions into one unit of work.
    pub party: Vec<i64>,
    /// What tied the party's sessions together, one line per tie (empty when alone).
    pub evidence: Vec<String>,
    /// Where: each of `session`'s nodes that queues behind one of `waits_for`'s (at most a
    /// few per pair of sessions).
    pub edges: Vec<WaitEdge>,
}

/// A cycle of sessions, each waiting for the next and the last for the first: none of them
/// can proceed until one of them gives up, is killed or expires.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Cycle {
    /// The steps, starting at the cycle's lowest session id.
    pub steps: Vec<CycleStep>,
}

impl Cycle {
    /// The parties in the cycle, in order, each by its lowest session id.
    pub fn sessions(&self) -> Vec<i64> {
        self.steps.iter().map(|s| s.session).collect()
    }

    /// Every session of every party in the cycle, in the cycle's order.
    pub fn all_sessions(&self) -> Vec<i64> {
        self.steps.iter().flat_map(|s| s.party.iter().copied()).collect()
    }

    /// The queue paths the cycle waits in, in order, each once.
    pub fn paths(&self) -> Vec<&str> {
        let mut paths: Vec<&str> = Vec::new();
        for edge in self.steps.iter().flat_map(|s| &s.edges) {
            if !paths.contains(&edge.path.as_str()) {
                paths.push(&edge.path);
            }
        }
        paths
    }
}

/// What [`crate::inspect::inspect`] found under a root.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Inspection {
    /// The root inspected.
    pub root: String,
    /// Whether the root exists (when not, nothing was found, and nothing can be).
    pub root_exists: bool,
    /// Every queue found, in path order.
    pub queues: Vec<QueueInfo>,
    /// Paths that looked like queues but could not be read as one.
    pub skipped: Vec<Skipped>,
    /// How many nodes were read: every path listed and every queue node read.
    pub nodes_read: usize,
    /// Whether the walk stopped at [`InspectOptions::max_nodes`] before the whole tree was read:
    /// a cycle through the unread part is not seen.
    pub truncated: bool,
    /// Every cycle of sessions waiting for each other (deadlocks), each once.
    pub cycles: Vec<Cycle>,
    /// Whether there were more cycles than [`InspectOptions::max_cycles`] (or too many to
    /// enumerate): those listed are some of them.
    pub cycles_truncated: bool,
    /// Every session that can never proceed as things stand: those in a cycle, and those that
    /// wait (directly or not) for one, each party's sessions all. Sorted.
    pub stuck_sessions: Vec<i64>,
}

/// Bounds of an inspection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InspectOptions {
    pub(crate) max_nodes: usize,
    pub(crate) max_cycles: usize,
}

impl Default for InspectOptions {
    fn default() -> InspectOptions {
        InspectOptions { max_nodes: 10_000, max_cycles: 100 }
    }
}

impl InspectOptions {
    /// The defaults: at most 10 000 nodes read, 100 cycles reported.
    pub fn new() -> InspectOptions {
        InspectOptions::default()
    }

    /// Read at most `max_nodes` nodes (paths listed plus queue nodes read); the walk stops
    /// there and says so ([`Inspection::truncated`]). At least 1.
    pub fn max_nodes(mut self, max_nodes: usize) -> InspectOptions {
        self.max_nodes = max_nodes.max(1);
        self
    }

    /// Report at most `max_cycles` cycles ([`Inspection::cycles_truncated`] says when there
    /// were more).
    pub fn max_cycles(mut self, max_cycles: usize) -> InspectOptions {
        self.max_cycles = max_cycles;
        self
    }
}
