//! Which children of a path are a queue, of which recipe and format, as `naming` reads names:
//! the same parsers and order every recipe uses. Pure.

use crate::error::Result;
use crate::format::NodeFormat;
use crate::markers::{LATCH, LEASE, LOCK, READ, WRITE};
use crate::naming::{sort_queue, NameScheme, QueueNode};

/// A family of queue names: the scheme that reads them and what they make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Family {
    /// Curator's `lock-`: a mutex, a semaphore mutex, a leader selector.
    Lock,
    /// Curator's `latch-`: a leader latch.
    Latch,
    /// Curator's `__READ__` and `__WRIT__`.
    ReadWrite,
    /// Curator's `lease-`: a semaphore's leases (its maximum is the path's data).
    Lease,
    /// kazoo's `__rlock__` and `__lock__` (a `Lock`, an `Election`, or a `ReadLock`/`WriteLock`).
    Kazoo,
}

impl Family {
    const ALL: [Family; 5] = [Family::ReadWrite, Family::Lease, Family::Latch, Family::Lock, Family::Kazoo];

    /// The scheme that reads this family's names (every role of the recipe).
    pub fn scheme(self) -> NameScheme {
        match self {
            Family::Lock => NameScheme::curator(&[LOCK]),
            Family::Latch => NameScheme::curator(&[LATCH]),
            Family::ReadWrite => NameScheme::curator(&[READ, WRITE]),
            Family::Lease => NameScheme::curator(&[LEASE]),
            Family::Kazoo => NameScheme::curator(&[READ, WRITE]).in_format(NodeFormat::Kazoo),
        }
    }

    /// What these names are, for messages.
    fn describe(self) -> &'static str {
        match self {
            Family::Lock => "Curator lock",
            Family::Latch => "Curator leader latch",
            Family::ReadWrite => "Curator read/write lock",
            Family::Lease => "Curator semaphore",
            Family::Kazoo => "kazoo lock",
        }
    }
}

/// The children of one path, sorted out.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Sorted {
    /// The queue, in queue order, if the children hold one.
    pub queue: Option<(Family, Vec<QueueNode<'static>>)>,
    /// Why the children that look like a queue can't be read as one.
    pub refused: Option<String>,
    /// The other children: paths to walk into.
    pub others: Vec<String>,
}

/// Sorts out the children of `path`: queue nodes (every one the recipes' parsers accept, in
/// either format) and the rest.
pub(crate) fn sort_out(path: &str, children: Vec<String>) -> Sorted {
    let mut groups: Vec<(Family, Vec<QueueNode<'static>>)> = Vec::new();
    let mut others = Vec::new();
    for child in children {
        let parsed = NodeFormat::detect(&child).and_then(|format| {
            Family::ALL
                .iter()
                .filter(|f| f.scheme().format == format)
                .find_map(|&f| f.scheme().parse(&child).map(|node| (f, node.owned())))
        });
        match parsed {
            Some((family, node)) => match groups.iter_mut().find(|(f, _)| *f == family) {
                Some((_, nodes)) => nodes.push(node),
                None => groups.push((family, vec![node])),
            },
            None => others.push(child),
        }
    }
    let mut sorted = Sorted { others, ..Sorted::default() };
    match groups.len() {
        0 => {}
        1 => {
            let (family, mut nodes) = groups.pop().expect("one group");
            match order(&mut nodes, family, path) {
                Ok(()) => sorted.queue = Some((family, nodes)),
                Err(e) => sorted.refused = Some(e.to_string()),
            }
        }
        _ => {
            let names: Vec<&str> = groups.iter().map(|(f, _)| f.describe()).collect();
            sorted.refused = Some(format!(
                "nodes of several recipes on one path ({}): they do not exclude each other, and no \
                 order between them is defined",
                names.join(", ")
            ));
        }
    }
    sorted
}

fn order(nodes: &mut [QueueNode], family: Family, path: &str) -> Result<()> {
    sort_queue(nodes, &family.scheme(), path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::markers::WRITER;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_recipe_and_format_is_recognised() {
        let cases: [(&str, Family); 7] = [
            ("_c_0f8e9b9e-6c4b-4f0e-9a57-2b7d0a1c3e11-lock-0000000001", Family::Lock),
            ("lock-0000000001", Family::Lock),
            ("_c_0f8e9b9e-6c4b-4f0e-9a57-2b7d0a1c3e11-latch-0000000002", Family::Latch),
            ("_c_0f8e9b9e-6c4b-4f0e-9a57-2b7d0a1c3e11-w2-lease-0000000003", Family::Lease),
            ("_c_0f8e9b9e-6c4b-4f0e-9a57-2b7d0a1c3e11-__WRIT__0000000005", Family::ReadWrite),
            ("0f8e9b9e6c4b4f0e9a572b7d0a1c3e11__lock__0000000006", Family::Kazoo),
            ("0f8e9b9e6c4b4f0e9a572b7d0a1c3e11__rlock__0000000007", Family::Kazoo),
        ];
        for (name, family) in cases {
            let sorted = sort_out("/p", names(&[name, "orders"]));
            assert_eq!(sorted.queue.map(|(f, _)| f), Some(family), "{name}");
            assert_eq!(sorted.others, ["orders"]);
        }
    }

    #[test]
    fn a_queue_comes_in_order_with_its_roles() {
        let sorted = sort_out(
            "/p",
            names(&["_c_b-__READ__0000000003", "_c_a-__WRIT__0000000001", "_c_c-__READ__0000000002"]),
        );
        let (family, nodes) = sorted.queue.expect("a queue");
        assert_eq!(family, Family::ReadWrite);
        let seqs: Vec<i32> = nodes.iter().map(|n| n.seq).collect();
        assert_eq!(seqs, [1, 2, 3]);
        assert_eq!(nodes[0].marker, WRITER);
        // kazoo's `__lock__` is its write side.
        let (_, nodes) = sort_out("/p", names(&["u__lock__0000000001"])).queue.unwrap();
        assert_eq!(nodes[0].marker, WRITER);
    }

    #[test]
    fn mixed_recipes_or_formats_and_wrapped_counters_are_refused() {
        let mixed = sort_out("/p", names(&["_c_a-lock-0000000001", "_c_b-__READ__0000000002"]));
        assert!(mixed.queue.is_none());
        assert!(mixed.refused.unwrap().contains("Curator lock, Curator read/write lock"));
        let formats = sort_out("/p", names(&["_c_a-lock-0000000001", "u__lock__0000000002"]));
        assert!(formats.refused.unwrap().contains("kazoo lock"));
        let wrapped = sort_out("/p", names(&["_c_a-lock-2147483647", "_c_b-lock--2147483648"]));
        assert!(wrapped.refused.unwrap().contains("/p"));
    }

    #[test]
    fn other_children_are_walked_into() {
        let sorted = sort_out("/p", names(&["locks", "lock-12", "nightly-lock-report", "_c_x-unknown"]));
        assert!(sorted.queue.is_none() && sorted.refused.is_none());
        assert_eq!(sorted.others.len(), 4);
    }
}
