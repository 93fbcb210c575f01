//! Queue node names: how we build ours, how we read everyone's, and how we order them.
//!
//! Curator's protected names look like `_c_<36-char uuid>-lock-0000000042`: a protection prefix
//! that identifies the creator's attempt (for recovery after a connection loss), a *marker* that
//! says what the node is (`lock-`, `latch-`, `__READ__`, `__WRIT__`), and ZooKeeper's sequence
//! suffix (`%010d` of a signed 32-bit counter).
//!
//! Ordering is by sequence number. Curator sorts by the text after the marker, which is the
//! same order for the non-negative, zero-padded suffixes ZooKeeper produces. We also order
//! correctly across the signed 32-bit wrap (`2147483647` is followed by `-2147483648`), which
//! Curator's text sort does not: see [`sort_queue`].

/// A node-naming convention, for sharing a lock path with another client library.
///
/// Curator and kazoo can never safely share a path (Curator sorts kazoo's names, which have no
/// `lock-`, by the whole name), so a recipe refuses a path that holds the other format's nodes
/// ([`crate::Error::FormatConflict`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeFormat {
    /// Apache Curator's protected names, `_c_<uuid>-<marker><seq>` (the default).
    #[default]
    Curator,
    /// kazoo's names, `<32-hex uuid>__lock__<seq>` (read locks `__rlock__`).
    Kazoo,
}

impl NodeFormat {
    /// Which format a child name was made by, if it looks like a queue node of either.
    pub(crate) fn detect(name: &str) -> Option<NodeFormat> {
        const KAZOO: [&str; 2] = ["__lock__", "__rlock__"];
        const CURATOR: [&str; 4] = ["lock-", "latch-", "__READ__", "__WRIT__"];
        let ends_with_seq = |markers: &[&str]| {
            markers
                .iter()
                .any(|m| name.rfind(m).is_some_and(|at| parse_sequence(&name[at + m.len()..]).is_some()))
        };
        if ends_with_seq(&KAZOO) {
            Some(NodeFormat::Kazoo)
        } else if name.starts_with("_c_") || ends_with_seq(&CURATOR) {
            Some(NodeFormat::Curator)
        } else {
            None
        }
    }

    /// The name for `format` of a recipe's role (the Curator marker given).
    pub(crate) fn marker(self, curator: &'static str) -> &'static str {
        match (self, curator) {
            (NodeFormat::Curator, m) => m,
            (NodeFormat::Kazoo, "__READ__") => "__rlock__",
            (NodeFormat::Kazoo, _) => "__lock__",
        }
    }
}

impl std::fmt::Display for NodeFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NodeFormat::Curator => "curator",
            NodeFormat::Kazoo => "kazoo",
        })
    }
}

impl std::str::FromStr for NodeFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<NodeFormat, String> {
        match s.to_ascii_lowercase().as_str() {
            "curator" => Ok(NodeFormat::Curator),
            "kazoo" => Ok(NodeFormat::Kazoo),
            other => Err(format!("unknown node format {other:?} (curator or kazoo)")),
        }
    }
}

/// What a recipe's queue contains: the format, the markers of the nodes that take part in the
/// queue, and the marker this contender creates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NameScheme {
    pub format: NodeFormat,
    /// Every marker that counts as a contender in this queue, e.g. `["__READ__", "__WRIT__"]`.
    pub markers: &'static [&'static str],
}

impl NameScheme {
    pub const fn curator(markers: &'static [&'static str]) -> NameScheme {
        NameScheme { format: NodeFormat::Curator, markers }
    }

    /// The same roles named the `format` way.
    pub fn in_format(self, format: NodeFormat) -> NameScheme {
        const KAZOO_LOCK: &[&str] = &["__lock__"];
        const KAZOO_RW: &[&str] = &["__rlock__", "__lock__"];
        match format {
            NodeFormat::Curator => self,
            NodeFormat::Kazoo if self.markers.len() == 2 => NameScheme { format, markers: KAZOO_RW },
            NodeFormat::Kazoo => NameScheme { format, markers: KAZOO_LOCK },
        }
    }

    /// A fresh protection prefix for one create attempt: `_c_<uuid>-` (Curator) or
    /// `<32-hex uuid>` (kazoo).
    pub fn new_protection(&self) -> String {
        match self.format {
            NodeFormat::Curator => format!("_c_{}-", uuid::Uuid::new_v4().hyphenated()),
            NodeFormat::Kazoo => uuid::Uuid::new_v4().simple().to_string(),
        }
    }

    /// The first child made by the other format, if any: sharing a path with it is unsafe.
    pub fn conflicting<'a>(&self, children: &'a [String]) -> Option<&'a String> {
        children.iter().find(|c| NodeFormat::detect(c).is_some_and(|f| f != self.format))
    }

    /// Parses a child name; `None` for a foreign node that is not part of this queue.
    pub fn parse(&self, name: &str) -> Option<QueueNode> {
        // The last occurrence of any marker, as Curator's `lastIndexOf(lockName)`.
        let (marker, at) = self
            .markers
            .iter()
            .enumerate()
            .filter_map(|(i, m)| name.rfind(m).map(|at| (i, at + m.len())))
            .max_by_key(|&(_, at)| at)?;
        let seq = parse_sequence(&name[at..])?;
        Some(QueueNode { name: name.to_string(), seq, marker })
    }
}

/// ZooKeeper's sequence suffix: `%010d` of an `i32`, so ten digits, or a minus sign and at
/// least nine digits. Anything else (`+5`, `12`, spaces, overflow) is not a sequence.
pub(crate) fn parse_sequence(text: &str) -> Option<i32> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if text.len() < 10 || digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A parsed queue node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct QueueNode {
    /// The child name, without the parent path.
    pub name: String,
    /// The sequence number.
    pub seq: i32,
    /// Index of its marker in [`NameScheme::markers`].
    pub marker: usize,
}

/// Sorts queue nodes into creation order.
///
/// ZooKeeper's counter counts up through `i32::MAX` to `i32::MIN` and on to `-1` and `0` again.
/// As unsigned 32-bit numbers that is one increasing run that wraps only at `u32::MAX`, so we
/// sort by `seq as u32` and then rotate the list to start after its largest circular gap: live
/// nodes of one queue span far less than half the counter's range, so the largest gap is
/// where the counter wrapped (or the ordinary gap from the highest back to the lowest). Ties
/// (possible only with hand-made names) break by name, so the order is total.
pub(crate) fn sort_queue(nodes: &mut [QueueNode]) {
    nodes.sort_by(|a, b| (a.seq as u32, &a.name).cmp(&(b.seq as u32, &b.name)));
    if nodes.len() < 2 {
        return;
    }
    let key = |n: &QueueNode| u64::from(n.seq as u32);
    let mut start = 0;
    let mut widest = key(&nodes[0]) + (1u64 << 32) - key(&nodes[nodes.len() - 1]);
    for i in 1..nodes.len() {
        let gap = key(&nodes[i]) - key(&nodes[i - 1]);
        if gap > widest {
            widest = gap;
            start = i;
        }
    }
    nodes.rotate_left(start);
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCK: NameScheme = NameScheme::curator(&["lock-"]);

    fn node(seq: i32) -> QueueNode {
        QueueNode { name: format!("_c_x-lock-{seq:010}"), seq, marker: 0 }
    }

    #[test]
    fn parses_curator_names_and_ignores_foreign_ones() {
        let n = LOCK.parse("_c_0b5c1b0e-9c8e-4f4c-9a8e-6f3c2b1a0d9e-lock-0000000042").expect("ours");
        assert_eq!(n.seq, 42);
        assert_eq!(
            LOCK.parse("lock-0000000007").map(|n| n.seq),
            Some(7),
            "Curator counts unprotected names too"
        );
        assert_eq!(LOCK.parse("_c_x-lock--2147483648").map(|n| n.seq), Some(i32::MIN));
        assert_eq!(LOCK.parse("_c_x-lock--000000005").map(|n| n.seq), Some(-5));
        for foreign in [
            "config",
            "lock-",
            "lock-12",
            "lock-+000000012",
            "_c_x-latch-0000000001",
            "lock-00000000001x",
            "lock-9999999999",
        ] {
            assert_eq!(LOCK.parse(foreign), None, "{foreign:?}");
        }
    }

    #[test]
    fn the_last_marker_wins_as_in_curator() {
        let rw = NameScheme::curator(&["__READ__", "__WRIT__"]);
        let n = rw.parse("_c_u-__READ__x__WRIT__0000000003").expect("parsed");
        assert_eq!((n.seq, n.marker), (3, 1));
    }

    #[test]
    fn detects_each_format() {
        assert_eq!(
            NodeFormat::detect("_c_0b5c1b0e-9c8e-4f4c-9a8e-6f3c2b1a0d9e-lock-0000000042"),
            Some(NodeFormat::Curator)
        );
        assert_eq!(NodeFormat::detect("_c_x-latch-0000000001"), Some(NodeFormat::Curator));
        assert_eq!(NodeFormat::detect("_c_x-__WRIT__0000000001"), Some(NodeFormat::Curator));
        assert_eq!(NodeFormat::detect("lock-0000000007"), Some(NodeFormat::Curator));
        assert_eq!(
            NodeFormat::detect("0b5c1b0e9c8e4f4c9a8e6f3c2b1a0d9e__lock__0000000003"),
            Some(NodeFormat::Kazoo)
        );
        assert_eq!(
            NodeFormat::detect("0b5c1b0e9c8e4f4c9a8e6f3c2b1a0d9e__rlock__0000000003"),
            Some(NodeFormat::Kazoo)
        );
        assert_eq!(NodeFormat::detect("config"), None);
        assert_eq!(NodeFormat::detect("lock-12"), None);
    }

    #[test]
    fn kazoo_names_parse_in_the_kazoo_scheme() {
        let kazoo = NameScheme::curator(&["lock-"]).in_format(NodeFormat::Kazoo);
        assert_eq!(kazoo.parse("0b5c1b0e9c8e4f4c9a8e6f3c2b1a0d9e__lock__0000000003").map(|n| n.seq), Some(3));
        assert_eq!(kazoo.parse("_c_x-lock-0000000003"), None);
        assert_eq!(kazoo.new_protection().len(), 32);
        let rw = NameScheme::curator(&["__READ__", "__WRIT__"]).in_format(NodeFormat::Kazoo);
        assert_eq!(rw.parse("ab__rlock__0000000004").map(|n| n.marker), Some(0));
        assert_eq!(rw.parse("ab__lock__0000000005").map(|n| n.marker), Some(1));
        let children = vec!["ab__lock__0000000001".to_string(), "_c_x-lock-0000000002".to_string()];
        assert_eq!(kazoo.conflicting(&children), Some(&children[1]));
        assert_eq!(NameScheme::curator(&["lock-"]).conflicting(&children), Some(&children[0]));
    }

    #[test]
    fn sorts_by_sequence() {
        let mut q = vec![node(3), node(1), node(2)];
        sort_queue(&mut q);
        assert_eq!(q.iter().map(|n| n.seq).collect::<Vec<_>>(), [1, 2, 3]);
    }

    #[test]
    fn sorts_across_the_signed_wrap() {
        let mut q = vec![node(i32::MIN + 1), node(i32::MAX), node(i32::MIN), node(i32::MAX - 1)];
        sort_queue(&mut q);
        assert_eq!(
            q.iter().map(|n| n.seq).collect::<Vec<_>>(),
            [i32::MAX - 1, i32::MAX, i32::MIN, i32::MIN + 1]
        );
    }

    #[test]
    fn sorts_across_the_unsigned_wrap() {
        let mut q = vec![node(1), node(-1), node(0), node(-2)];
        sort_queue(&mut q);
        assert_eq!(q.iter().map(|n| n.seq).collect::<Vec<_>>(), [-2, -1, 0, 1]);
    }

    mod fuzz {
        use proptest::collection::vec;
        use proptest::prelude::*;

        use super::super::*;
        use super::LOCK;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

            /// No child name makes the parsers panic, and what parses ends with its sequence.
            #[test]
            fn parsing_any_name_never_panics(name in "\\PC{0,80}") {
                if let Some(node) = LOCK.parse(&name) {
                    let suffix = format!("{:010}", node.seq);
                    prop_assert!(name.ends_with(&suffix), "{} does not end with {}", name, suffix);
                }
                let _ = NodeFormat::detect(&name);
                let _ = LOCK.in_format(NodeFormat::Kazoo).parse(&name);
            }

            /// A queue, shuffled and mixed with foreign names, sorts back into creation order
            /// wherever its sequence numbers start (so across the signed and unsigned wraps),
            /// also when uuids repeat.
            #[test]
            fn queues_sort_into_creation_order_across_any_wrap(
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
                    .map(|(i, s)| format!("_c_{}-lock-{s:010}", if same_uuid { "same".to_string() } else { format!("u{i}") }))
                    .collect();
                let mut children: Vec<String> = created.iter().cloned().chain(foreign).collect();
                children.sort_by_key(|c| c.bytes().fold(start as u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b))));
                let mut queue: Vec<QueueNode> = children.iter().filter_map(|c| LOCK.parse(c)).collect();
                sort_queue(&mut queue);
                prop_assert_eq!(queue.into_iter().map(|n| n.name).collect::<Vec<_>>(), created);
            }
        }
    }
}
