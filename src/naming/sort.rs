//! The order of a queue: the one every participant on the path computes, or a refusal once
//! ZooKeeper's sequence counter wrapped (see [`sort_queue`]).

use super::scheme::{NameScheme, QueueNode};
use super::sequence::text_order_key;
use crate::error::{Error, Result};
use crate::format::NodeFormat;

/// Sorts a queue into the order every participant on the path computes, and checks that this
/// order is creation order.
///
/// **The order.** Curator (`LockInternals.getSortedChildren` with
/// `StandardLockInternalsDriver.fixForSorting`) sorts children by the text after the last
/// marker, and kazoo (`Lock._get_predecessor`) by the text its `(-?\d{10})$` pattern captures.
/// For the names ZooKeeper makes, both are the sequence suffix compared as text, so that is our
/// order too (ties, which ZooKeeper never makes, break by name).
///
/// **The wrap.** ZooKeeper's counter is a signed 32-bit number: after `2147483647` comes
/// `-2147483648`, and the text order then differs from creation order (a `-` sorts before every
/// digit, and `-000000003` before `-000000005`). Someone who created a node later could then
/// sort ahead of the holder, in Curator's eyes, kazoo's and ours alike: two holders. So when the
/// text order is not creation order we refuse with [`Error::SequenceWrapped`] instead of
/// guessing. Creation order is found without the text: read as unsigned 32-bit numbers the
/// counter runs up to `u32::MAX` and wraps to 0 only there, and live nodes of one queue span far
/// less than half of that range, so creation order starts after the largest circular gap.
///
/// With the kazoo format we also refuse any node from `-999999999` to `-1`: written with nine
/// digits after the sign, kazoo's pattern does not match it, so kazoo would not see it at all.
///
/// # Errors
/// [`Error::SequenceWrapped`] naming `path` and the first node out of creation order (in the
/// kazoo format, the first that kazoo can't see, if any), the same for any order of `nodes`.
pub(crate) fn sort_queue(nodes: &mut [QueueNode], scheme: &NameScheme, path: &str) -> Result<()> {
    let wrapped =
        |node: &QueueNode| Error::SequenceWrapped { path: path.to_string(), node: node.name.to_string() };
    nodes.sort_by(|a, b| (text_order_key(a.seq), &a.name).cmp(&(text_order_key(b.seq), &b.name)));
    if scheme.format == NodeFormat::Kazoo {
        // A ten-character negative text (`-000000005`): kazoo's pattern wants ten digits. The
        // first in the queue's order is named, not the first in the listing's (which ZooKeeper
        // sets in no order): every client, every time, names the same node.
        if let Some(unseen) = nodes.iter().find(|n| (-999_999_999..0).contains(&n.seq)) {
            return Err(wrapped(unseen));
        }
    }
    // Before any wrap (every listing but those of a path with 2^31 creations behind it) the
    // text order of non-negative sequences is their numeric order, which is creation order:
    // skip the second sort on this hot path.
    if nodes.iter().all(|n| n.seq >= 0) {
        return Ok(());
    }
    let created = creation_order(nodes);
    match nodes.iter().zip(&created).find(|(by_text, by_creation)| by_text.name != by_creation.name) {
        Some((ahead, _)) => Err(wrapped(ahead)),
        None => Ok(()),
    }
}

/// The nodes in creation order, across the counter's wrap (see [`sort_queue`]).
fn creation_order<'q, 'a>(nodes: &'q [QueueNode<'a>]) -> Vec<&'q QueueNode<'a>> {
    let mut order: Vec<&QueueNode> = nodes.iter().collect();
    order.sort_by(|a, b| (a.seq as u32, &a.name).cmp(&(b.seq as u32, &b.name)));
    if order.len() < 2 {
        return order;
    }
    let key = |n: &QueueNode| u64::from(n.seq as u32);
    let mut start = 0;
    let mut widest = key(order[0]) + (1u64 << 32) - key(order[order.len() - 1]);
    for i in 1..order.len() {
        let gap = key(order[i]) - key(order[i - 1]);
        if gap > widest {
            widest = gap;
            start = i;
        }
    }
    order.rotate_left(start);
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCK: NameScheme = NameScheme::curator(&["lock-"]);

    fn node(seq: i32) -> QueueNode<'static> {
        QueueNode { name: format!("_c_x-lock-{seq:010}").into(), seq, marker: 0 }
    }

    const KAZOO: NameScheme = NameScheme { format: NodeFormat::Kazoo, markers: &["__lock__"] };

    fn names(q: &[QueueNode]) -> Vec<i32> {
        q.iter().map(|n| n.seq).collect()
    }

    fn sorted(seqs: &[i32], scheme: &NameScheme) -> Result<Vec<i32>> {
        let mut q: Vec<QueueNode> = seqs.iter().map(|&s| node(s)).collect();
        sort_queue(&mut q, scheme, "/locks/x").map(|()| names(&q))
    }

    fn wrapped_at(result: Result<Vec<i32>>) -> i32 {
        match result {
            Err(Error::SequenceWrapped { path, node }) => {
                assert_eq!(path, "/locks/x");
                LOCK.parse(&node).expect("a queue node").seq
            }
            other => panic!("expected SequenceWrapped, got {other:?}"),
        }
    }

    #[test]
    fn sorts_by_sequence() {
        assert_eq!(sorted(&[3, 1, 2], &LOCK).unwrap(), [1, 2, 3]);
        assert_eq!(sorted(&[], &LOCK).unwrap(), Vec::<i32>::new());
        assert_eq!(sorted(&[i32::MAX, 0, 1_000_000_000], &LOCK).unwrap(), [0, 1_000_000_000, i32::MAX]);
    }

    /// The text order (Curator's and kazoo's) puts `-2147483648`, created after `2147483647`,
    /// first: refused, naming the node that jumped the queue.
    #[test]
    fn refuses_the_signed_wrap() {
        assert_eq!(wrapped_at(sorted(&[i32::MAX - 1, i32::MAX, i32::MIN], &LOCK)), i32::MIN);
        assert_eq!(
            wrapped_at(sorted(&[i32::MIN + 1, i32::MAX, i32::MIN, i32::MAX - 1], &LOCK)),
            i32::MIN + 1
        );
        assert_eq!(wrapped_at(sorted(&[i32::MAX, i32::MIN], &KAZOO)), i32::MIN);
    }

    /// Among negative numbers the text order runs against creation order: `-000000003` (created
    /// later) sorts before `-000000005`.
    #[test]
    fn refuses_negative_sequences_out_of_creation_order() {
        assert_eq!(wrapped_at(sorted(&[-5, -3], &LOCK)), -3);
        assert_eq!(wrapped_at(sorted(&[-2, -1, 0, 1], &LOCK)), -1);
        assert_eq!(wrapped_at(sorted(&[i32::MIN, i32::MIN + 1], &LOCK)), i32::MIN + 1);
        assert_eq!(wrapped_at(sorted(&[i32::MIN, -1_500_000_000], &KAZOO)), -1_500_000_000);
        // `-1000000000` is older than `-999999999` and sorts first as text ('1' < '9'): no refusal.
        assert_eq!(sorted(&[-999_999_999, -1_000_000_000], &LOCK).unwrap(), [-1_000_000_000, -999_999_999]);
    }

    /// Where the text order still is creation order, a negative sequence is fine in the Curator
    /// format: `-000000005` sorts before `0000000001` as text, and was created before it.
    #[test]
    fn accepts_negative_sequences_where_the_text_order_is_creation_order() {
        assert_eq!(sorted(&[1, -5], &LOCK).unwrap(), [-5, 1]);
        assert_eq!(sorted(&[-5], &LOCK).unwrap(), [-5]);
        assert_eq!(sorted(&[i32::MIN], &KAZOO).unwrap(), [i32::MIN]);
    }

    /// kazoo's `(-?\d{10})$` does not match `-000000005`: kazoo would not see that node, so the
    /// kazoo format refuses it even alone.
    #[test]
    fn the_kazoo_format_refuses_nodes_kazoo_cannot_see() {
        assert_eq!(wrapped_at(sorted(&[-5], &KAZOO)), -5);
        assert_eq!(wrapped_at(sorted(&[3, -999_999_999], &KAZOO)), -999_999_999);
        assert_eq!(wrapped_at(sorted(&[-1], &KAZOO)), -1);
    }

    #[test]
    fn the_error_says_what_to_do() {
        let message = wrapped_err_message();
        assert!(message.contains("/locks/x"), "{message}");
        assert!(message.contains("delete it once empty"), "{message}");
        assert!(message.contains("counter starts at 0"), "{message}");
    }

    fn wrapped_err_message() -> String {
        sorted(&[i32::MAX, i32::MIN], &LOCK).unwrap_err().to_string()
    }

    mod fuzz {
        use proptest::collection::vec;
        use proptest::prelude::*;

        use super::super::*;
        use super::LOCK;
        use crate::naming::sequence_text;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

            /// A queue, shuffled and mixed with foreign names, wherever its sequence numbers
            /// start (so across the signed and unsigned wraps), also when uuids repeat: never a
            /// panic; either the order is creation order and the text order (Curator's and
            /// kazoo's), or `SequenceWrapped` because those two differ.
            #[test]
            fn queues_sort_by_text_or_refuse_across_any_wrap(
                start in any::<i32>(),
                steps in vec(1u32..5000, 0..60),
                foreign in vec("[a-z_-]{0,20}", 0..10),
                same_uuid in any::<bool>(),
            ) {
                let mut seqs = vec![start];
                for step in steps {
                    let next = seqs[seqs.len() - 1].wrapping_add(step as i32);
                    seqs.push(next);
                }
                let created: Vec<String> = seqs
                    .iter()
                    .enumerate()
                    .map(|(i, s)| {
                        let uuid = if same_uuid { "same".to_string() } else { format!("u{i}") };
                        format!("_c_{uuid}-lock-{s:010}")
                    })
                    .collect();
                let mut children: Vec<String> = created.iter().cloned().chain(foreign).collect();
                let hash = |c: &String| {
                    c.bytes().fold(start as u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
                };
                children.sort_by_key(hash);
                let mut queue: Vec<QueueNode> = children.iter().filter_map(|c| LOCK.parse(c)).collect();
                let mut by_text = created.clone();
                by_text.sort_by_key(|name| {
                    (name.rsplit_once("lock-").map(|(_, seq)| seq.to_string()), name.clone())
                });
                match sort_queue(&mut queue, &LOCK, "/p") {
                    Ok(()) => {
                        let order: Vec<String> = queue.into_iter().map(|n| n.name.into_owned()).collect();
                        prop_assert_eq!(&order, &created);
                        prop_assert_eq!(&order, &by_text);
                    }
                    Err(Error::SequenceWrapped { path, node }) => {
                        prop_assert_eq!(path, "/p");
                        prop_assert!(created.contains(&node));
                        prop_assert_ne!(by_text, created);
                    }
                    Err(other) => prop_assert!(false, "unexpected error {}", other),
                }
            }

            /// Any parsed names, also hand-made ones with repeated or wrapped sequences, in either
            /// format: sorting never panics, and what it accepts is in text order.
            #[test]
            fn sorting_any_names_never_panics(
                seqs in vec(any::<i32>(), 0..20),
                kazoo in any::<bool>(),
            ) {
                let scheme = if kazoo { LOCK.in_format(NodeFormat::Kazoo) } else { LOCK };
                let marker = if kazoo { "__lock__" } else { "lock-" };
                let names: Vec<String> =
                    seqs.iter().enumerate().map(|(i, s)| format!("u{i}{marker}{s:010}")).collect();
                let mut queue: Vec<QueueNode> = names.iter().filter_map(|n| scheme.parse(n)).collect();
                prop_assert_eq!(queue.len(), seqs.len());
                if sort_queue(&mut queue, &scheme, "/p").is_ok() {
                    let texts: Vec<String> = queue.iter().map(|n| sequence_text(n.seq)).collect();
                    prop_assert!(texts.windows(2).all(|w| w[0] <= w[1]));
                }
            }
        }
    }
}
