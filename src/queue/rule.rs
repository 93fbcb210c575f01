//! The admission rule: who in a queue may proceed, and whom a waiter watches. Pure: it sees the
//! queue's parsed nodes in order and does no I/O. A recipe is a rule on the shared engine.

use crate::naming::QueueNode;

/// What a recipe's rule says about one contender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// It may proceed now.
    Proceed,
    /// It must wait until the node at index `on` is gone (or its data changes: then it looks
    /// again). `then_proceed` is true when that node's deletion alone admits it (so no new
    /// listing is needed).
    Wait { on: usize, then_proceed: bool },
    /// It must wait until any of the nodes at indexes `0..upto` is gone, then look again (a
    /// semaphore's first waiter, woken by whichever holder releases first). The engine watches
    /// the one node with a data watch, and several with a child watch on the root (one listing
    /// per change: `Queue::watch_children`), or with a data watch on each under a lock delay.
    WaitAny { upto: usize },
}

/// A recipe's rule for who may proceed.
pub(crate) trait Admission: Send + Sync {
    /// `queue` is in creation order; `me` is the contender's index in it.
    fn decide(&self, queue: &[QueueNode], me: usize) -> Decision;

    /// Whether a contender just admitted at index `me` must touch its node's data, to wake a
    /// successor that watches it while waiting (a semaphore's waiters queue on the waiter ahead,
    /// and only the first waiter watches the holders).
    fn announce_admission(&self, _queue: &[QueueNode], _me: usize) -> bool {
        false
    }

    /// A node to watch beside the one a waiter at `me` waits `on` (an index ahead of `on`), so
    /// that it lists the queue again when that one goes, while `on` still holds it back: a
    /// mutex's waiter watches the node two ahead of it as well, and once its predecessor is the
    /// head it enters on the predecessor's deletion alone, one hop instead of two. A deletion
    /// then notifies at most two waiters. `None` (the default): watch `on` only.
    fn lookahead(&self, _queue: &[QueueNode], _me: usize, _on: usize) -> Option<usize> {
        None
    }

    /// Whether the node at `at` is only ever admitted at the head of the queue (a mutex's, a
    /// writer's), so that it leaves a tombstone when it releases (`Queue::tombstones`): the
    /// waiter right behind it, if it has a look-ahead ([`Admission::lookahead`]), watches that
    /// tombstone's name instead, and proceeds with no listing once the node is gone having left
    /// one. Then every node before the waiter's is gone and the waiter is the head, which every
    /// rule admits; a rule says yes only if it needs nothing else of an admission (no
    /// [`Admission::announce_admission`]). A node that a rule may admit further back (a reader)
    /// leaves none even when it happens to be admitted at the head: nobody would watch for it.
    /// `false` (the default): no tombstones.
    fn leaves_tombstone(&self, _queue: &[QueueNode], _at: usize) -> bool {
        false
    }
}

/// The first `n` in the queue proceed; the others wait on the node `n` places ahead. A mutex and a
/// leader latch are `FirstN(1)`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FirstN(pub usize);

impl Admission for FirstN {
    fn decide(&self, _queue: &[QueueNode], me: usize) -> Decision {
        if me < self.0 {
            Decision::Proceed
        } else {
            Decision::Wait { on: me - self.0, then_proceed: me == self.0 }
        }
    }

    /// One holder: the node ahead of the one we wait on (see [`Admission::lookahead`]).
    fn lookahead(&self, _queue: &[QueueNode], _me: usize, on: usize) -> Option<usize> {
        on.checked_sub(1).filter(|_| self.0 == 1)
    }

    /// One holder: admitted only at the head.
    fn leaves_tombstone(&self, _queue: &[QueueNode], _at: usize) -> bool {
        self.0 == 1
    }
}
