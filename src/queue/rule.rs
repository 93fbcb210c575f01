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
    /// that it lists the queue again when that one goes, while `on` still holds it back, and
    /// once its predecessor is the head it enters on the predecessor's deletion alone, one hop
    /// instead of two. A deletion then notifies at most two waiters. `None` (the default):
    /// watch `on` only. The engine watches it only under a lock delay: with tombstones on (the
    /// default, see [`Admission::leaves_tombstone`]) a waiter right behind a node that leaves
    /// one watches that tombstone's name instead, and a rule's look-ahead only says that it
    /// may. A mutex's look-ahead is the node two ahead of its waiter.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::naming::NameScheme;
    use crate::path::LockPath;
    use crate::queue::decide_on;

    const LOCK: NameScheme = NameScheme::curator(&["lock-"]);

    /// What `rule` says of `name` on the listing `children` of `/locks/x` under `scheme`.
    fn decide(
        scheme: &NameScheme,
        rule: &dyn Admission,
        name: &str,
        children: &[&str],
    ) -> Result<Decision, Error> {
        let children: Vec<String> = children.iter().map(|c| c.to_string()).collect();
        let root = LockPath::new("/locks/x").unwrap();
        decide_on(scheme, &root, rule, name, &children).map(|(_, _, decision)| decision)
    }

    /// A listing as ZooKeeper gives it (in no order), with foreign children beside the queue: a
    /// tombstone, a name without a sequence, a malformed sequence, a bare marker.
    const LISTING: [&str; 8] = [
        "_c_c-lock-0000000007",
        "0000000004.released",
        "_c_a-lock-0000000003",
        "config",
        "_c_z-lock-00000x0009",
        "lock-",
        "_c_b-lock-0000000005",
        "_c_d-lock-0000000012",
    ];

    #[test]
    fn a_mutex_admits_the_head_and_queues_the_rest_on_their_predecessor() {
        let rule = FirstN(1);
        assert_eq!(decide(&LOCK, &rule, "_c_a-lock-0000000003", &LISTING).unwrap(), Decision::Proceed);
        assert_eq!(
            decide(&LOCK, &rule, "_c_b-lock-0000000005", &LISTING).unwrap(),
            Decision::Wait { on: 0, then_proceed: true }
        );
        assert_eq!(
            decide(&LOCK, &rule, "_c_d-lock-0000000012", &LISTING).unwrap(),
            Decision::Wait { on: 2, then_proceed: false }
        );
    }

    #[test]
    fn a_mutex_looks_ahead_one_node_and_leaves_tombstones() {
        let queue: Vec<QueueNode> = (0..4)
            .map(|seq| QueueNode { name: format!("_c_x-lock-{seq:010}").into(), seq, marker: 0 })
            .collect();
        let rule = FirstN(1);
        assert_eq!(rule.lookahead(&queue, 3, 2), Some(1));
        assert_eq!(rule.lookahead(&queue, 1, 0), None, "nothing ahead of the head");
        assert!(rule.leaves_tombstone(&queue, 0));
        assert!(!rule.announce_admission(&queue, 0));
        // Several holders: no look-ahead, no tombstones (a holder may be admitted further back).
        assert_eq!(FirstN(2).lookahead(&queue, 3, 1), None);
        assert!(!FirstN(2).leaves_tombstone(&queue, 0));
        assert_eq!(FirstN(2).decide(&queue, 1), Decision::Proceed);
        assert_eq!(FirstN(2).decide(&queue, 3), Decision::Wait { on: 1, then_proceed: false });
    }

    /// A node not in the listing (deleted by someone else) is an error, never an admission.
    #[test]
    fn our_node_missing_from_the_listing_is_an_error() {
        match decide(&LOCK, &FirstN(1), "_c_q-lock-0000000001", &LISTING) {
            Err(Error::NodeDeleted { path }) => assert_eq!(path, "/locks/x/_c_q-lock-0000000001"),
            other => panic!("expected NodeDeleted, got {other:?}"),
        }
        // A foreign child by our name's rules (malformed sequence) is not ours either.
        assert!(matches!(
            decide(&LOCK, &FirstN(1), "_c_z-lock-00000x0009", &LISTING),
            Err(Error::NodeDeleted { .. })
        ));
    }

    /// After the counter's wrap the text order is not creation order: refused, whoever asks.
    #[test]
    fn a_wrapped_sequence_is_refused() {
        let listing = ["_c_a-lock-2147483647", "_c_b-lock--2147483648", "0000000001.released"];
        for me in &listing[..2] {
            match decide(&LOCK, &FirstN(1), me, &listing) {
                Err(Error::SequenceWrapped { path, node }) => {
                    assert_eq!(path, "/locks/x");
                    assert_eq!(node, "_c_b-lock--2147483648");
                }
                other => panic!("expected SequenceWrapped, got {other:?}"),
            }
        }
    }

    /// A node of the other format, or of another recipe, would admit beside us: refused.
    #[test]
    fn another_format_or_recipe_on_the_path_is_refused() {
        let kazoo = ["_c_a-lock-0000000001", "f3e1__lock__0000000002"];
        assert!(matches!(
            decide(&LOCK, &FirstN(1), "_c_a-lock-0000000001", &kazoo),
            Err(Error::FormatConflict { .. })
        ));
        let reader = ["_c_a-lock-0000000001", "_c_b-__READ__0000000002"];
        assert!(matches!(
            decide(&LOCK, &FirstN(1), "_c_a-lock-0000000001", &reader),
            Err(Error::RecipeConflict { .. })
        ));
    }
}
