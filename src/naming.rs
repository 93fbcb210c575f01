//! Queue node names: how we build ours, how we read everyone's, and how we order them.
//!
//! Curator's protected names look like `_c_<36-char uuid>-lock-0000000042`: a protection prefix
//! that identifies the creator's attempt (for recovery after a connection loss), a *marker* that
//! says what the node is (`lock-`, `latch-`, `__READ__`, `__WRIT__`), and ZooKeeper's sequence
//! suffix (`%010d` of a signed 32-bit counter).
//!
//! Ordering is the one every participant on a path computes: Curator sorts by the text after
//! the marker, and kazoo by the text of its `-?\d{10}` suffix. For the non-negative, zero-padded
//! suffixes ZooKeeper produces that is creation order. After 2^31 creations under one parent the
//! counter wraps to negative numbers, and the text order no longer follows creation order; we
//! then refuse rather than order differently from the others: see [`sort_queue`].

use crate::error::{Error, Result};
pub use crate::format::NodeFormat;

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
        let id = protection_id();
        let mut buf = uuid::Uuid::encode_buffer();
        match self.format {
            NodeFormat::Curator => {
                let mut protection = String::with_capacity(3 + uuid::fmt::Hyphenated::LENGTH + 1);
                protection.push_str("_c_");
                protection.push_str(id.hyphenated().encode_lower(&mut buf));
                protection.push('-');
                protection
            }
            NodeFormat::Kazoo => id.simple().encode_lower(&mut buf).to_string(),
        }
    }

    /// The first child made by the other format, if any: sharing a path with it is unsafe.
    ///
    /// A child that [`NameScheme::parse`] accepts is never the other format's (its name ends
    /// with one of our markers and a sequence, which no marker of the other format does), so a
    /// listing needs this check only for the children that do not parse; the queue engine relies
    /// on that (property-tested).
    #[cfg(test)]
    pub fn conflicting<'a>(&self, children: &'a [String]) -> Option<&'a String> {
        children.iter().find(|c| NodeFormat::detect(c).is_some_and(|f| f != self.format))
    }

    /// What our queue is, for messages: `lock`, `leader latch`, `read/write lock`, `semaphore`.
    pub fn recipe(&self) -> &'static str {
        let ours = self.markers.first().copied().unwrap_or_default();
        match self.markers {
            [_, _] => "read/write lock",
            _ => {
                recipe_kinds(self.format).iter().find(|(m, _)| *m == ours).map_or("lock", |(_, kind)| kind.1)
            }
        }
    }

    /// What recipe a child that is not part of this queue belongs to, when its name says: a
    /// marker of another recipe (in this format) followed by a sequence suffix, as
    /// [`NameScheme::parse`] reads ours. Such a recipe ignores our nodes as we ignore its, so
    /// both would admit at once: a queue refuses a path that holds one.
    pub fn other_recipe(&self, name: &str) -> Option<&'static str> {
        let (marker, at) = recipe_kinds(self.format)
            .iter()
            .filter_map(|(m, _)| name.rfind(m).map(|at| (*m, at + m.len())))
            .max_by_key(|&(_, at)| at)?;
        if self.markers.contains(&marker) || parse_sequence(&name[at..]).is_none() {
            return None;
        }
        recipe_kinds(self.format).iter().find(|(m, _)| *m == marker).map(|(_, kind)| kind.0)
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

/// Every queue marker of `format`, with what a node carrying it belongs to (as said of a node
/// found, and as said of our own queue).
fn recipe_kinds(format: NodeFormat) -> &'static [(&'static str, (&'static str, &'static str))] {
    const LOCK: (&str, &str) = ("a lock (mutex, semaphore mutex or leader selector)", "lock");
    use crate::markers::{LATCH, LEASE, LOCK as LOCK_MARKER, READ, WRITE};
    const CURATOR: [(&str, (&str, &str)); 5] = [
        (LOCK_MARKER, LOCK),
        (LATCH, ("a leader latch", "leader latch")),
        (READ, ("a read/write lock", "read/write lock")),
        (WRITE, ("a read/write lock", "read/write lock")),
        (LEASE, ("a semaphore", "semaphore")),
    ];
    const KAZOO: [(&str, (&str, &str)); 2] = [
        ("__lock__", ("a lock (kazoo's Lock, Election or write lock)", "lock")),
        ("__rlock__", ("a read/write lock's read side", "read/write lock")),
    ];
    match format {
        NodeFormat::Curator => &CURATOR,
        NodeFormat::Kazoo => &KAZOO,
    }
}

/// A version 4 UUID unique in this process: 72 random bits drawn once per process, and a
/// 56-bit counter (the UUID's last seven bytes). A protection prefix must tell our creates apart
/// (and recovery also checks the node's owner session), which a counter does without asking the
/// kernel for randomness on every acquire.
fn protection_id() -> uuid::Uuid {
    use std::sync::atomic::{AtomicU64, Ordering};
    static BASE: std::sync::OnceLock<u128> = std::sync::OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let base = *BASE.get_or_init(|| uuid::Uuid::new_v4().as_u128());
    let count = u128::from(NEXT.fetch_add(1, Ordering::Relaxed) & ((1 << 56) - 1));
    // The count changes only bytes 9..16 (big-endian): neither the version (byte 6) nor the
    // variant (byte 8) that the builder sets.
    uuid::Builder::from_random_bytes((base ^ count).to_be_bytes()).into_uuid()
}

/// ZooKeeper's sequence suffix: `%010d` of an `i32`, so ten digits, or a minus sign and at
/// least nine digits, exactly as ZooKeeper writes it. Anything else (`+5`, `12`, spaces,
/// overflow, extra zero padding such as `-0000000005`) is not a sequence: every sequence we
/// accept is [`sequence_text`] of its value, so sorting by that text is sorting by the name's
/// own text, as Curator and kazoo do.
pub(crate) fn parse_sequence(text: &str) -> Option<i32> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if text.len() < 10 || digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seq: i32 = text.parse().ok()?;
    // Canonical (what `sequence_text(seq)` writes), checked without allocating: it runs for
    // every child of every listing.
    let canonical = if digits.len() == text.len() {
        text.len() == 10
    } else {
        match digits.len() {
            9 => seq != 0,
            10 => !digits.starts_with('0'),
            _ => false,
        }
    };
    canonical.then_some(seq)
}

/// A key whose order is the order of [`sequence_text`] (the text Curator and kazoo sort by),
/// computed without formatting: `-` sorts before every digit; non-negative values are ten
/// digits, so their text order is numeric; a negative value's digits (nine, zero-padded, or
/// ten) compare as text, where a nine-digit text that is a prefix of a ten-digit one comes
/// first.
fn text_order_key(seq: i32) -> (u8, u32, u8, u8) {
    if seq >= 0 {
        return (1, seq as u32, 0, 0);
    }
    let digits = seq.unsigned_abs();
    if digits < 1_000_000_000 {
        (0, digits, 0, 0)
    } else {
        (0, digits / 10, 1, (digits % 10) as u8)
    }
}

/// The suffix ZooKeeper writes for `seq`: Java's `%010d`, which Rust's `{:010}` matches (the
/// sign counts in the width): `0000000042`, `-000000005`, `-2147483648`.
/// A queue node's data as `(participant id, proclaimed value)`: `<id>` or `<id>\n<value>`.
pub(crate) fn split_data(data: &[u8]) -> (String, Vec<u8>) {
    match data.iter().position(|b| *b == b'\n') {
        Some(at) => (String::from_utf8_lossy(&data[..at]).into_owned(), data[at + 1..].to_vec()),
        None => (String::from_utf8_lossy(data).into_owned(), Vec::new()),
    }
}

/// What a participant `id` that proclaimed `value` stores in its node (see [`split_data`]).
pub(crate) fn join_data(id: &str, value: &[u8]) -> Vec<u8> {
    let mut data = Vec::with_capacity(id.len() + 1 + value.len());
    data.extend_from_slice(id.as_bytes());
    data.push(b'\n');
    data.extend_from_slice(value);
    data
}

#[cfg(test)] // the reference the allocation-free code is tested against
pub(crate) fn sequence_text(seq: i32) -> String {
    format!("{seq:010}")
}

/// Appends [`sequence_text`] of `seq` to `out` without the formatting machinery (it runs on every
/// acquire, to name the node we created).
pub(crate) fn push_sequence_text(out: &mut String, seq: i32) {
    let mut digits = [b'0'; 10];
    let mut n = seq.unsigned_abs();
    let mut used = 0;
    for slot in digits.iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
        used += 1;
        if n == 0 {
            break;
        }
    }
    // Ten characters in all, the sign included; zeros pad on the left of the digits.
    let width = if seq < 0 { 9 } else { 10 };
    if seq < 0 {
        out.push('-');
    }
    let start = digits.len() - used.max(width);
    out.reserve(digits.len() + 1 - start);
    for &digit in &digits[start..] {
        out.push(char::from(digit));
    }
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
/// [`Error::SequenceWrapped`] naming `path` and the first node out of creation order.
pub(crate) fn sort_queue(nodes: &mut [QueueNode], scheme: &NameScheme, path: &str) -> Result<()> {
    let wrapped =
        |node: &QueueNode| Error::SequenceWrapped { path: path.to_string(), node: node.name.clone() };
    if scheme.format == NodeFormat::Kazoo {
        // A ten-character negative text (`-000000005`): kazoo's pattern wants ten digits.
        if let Some(unseen) = nodes.iter().find(|n| (-999_999_999..0).contains(&n.seq)) {
            return Err(wrapped(unseen));
        }
    }
    nodes.sort_by(|a, b| (text_order_key(a.seq), &a.name).cmp(&(text_order_key(b.seq), &b.name)));
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
fn creation_order(nodes: &[QueueNode]) -> Vec<&QueueNode> {
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

    fn node(seq: i32) -> QueueNode {
        QueueNode { name: format!("_c_x-lock-{seq:010}"), seq, marker: 0 }
    }

    /// Each recipe names the others' nodes it finds, and never its own kind's (a mutex beside
    /// a selector or Curator's mutex, the two sides of a read/write lock); plain foreign
    /// children are nobody's.
    #[test]
    fn names_other_recipes_nodes_and_never_its_own_kinds() {
        const RW: NameScheme = NameScheme::curator(&["__READ__", "__WRIT__"]);
        const LATCH: NameScheme = NameScheme::curator(&["latch-"]);
        const LEASE: NameScheme = NameScheme::curator(&["lease-"]);
        let id = "_c_0b5c1b0e-9c8e-4f4c-9a8e-6f3c2b1a0d9e-";
        let lock = format!("{id}lock-0000000001");
        let latch = format!("{id}latch-0000000002");
        let read = format!("{id}__READ__0000000003");
        let write = format!("{id}__WRIT__0000000004");
        let lease = format!("{id}w2-lease-0000000005");
        assert_eq!(LOCK.other_recipe(&lock), None);
        assert_eq!(LOCK.other_recipe(&latch), Some("a leader latch"));
        assert_eq!(LOCK.other_recipe(&read), Some("a read/write lock"));
        assert_eq!(LOCK.other_recipe(&lease), Some("a semaphore"));
        assert_eq!(LATCH.other_recipe(&lock), Some("a lock (mutex, semaphore mutex or leader selector)"));
        assert_eq!(LATCH.other_recipe(&latch), None);
        assert_eq!(RW.other_recipe(&read), None);
        assert_eq!(RW.other_recipe(&write), None);
        assert_eq!(RW.other_recipe(&lock), Some("a lock (mutex, semaphore mutex or leader selector)"));
        assert_eq!(LEASE.other_recipe(&lease), None);
        assert_eq!(LEASE.other_recipe(&latch), Some("a leader latch"));
        // Not a queue node of anyone's: no sequence, or no marker.
        for plain in ["config", "lock-", "leases", "_c_x-latch-12", "latch-00000000x1"] {
            assert_eq!(LOCK.other_recipe(plain), None, "{plain}");
        }
        let kazoo_lock = LOCK.in_format(NodeFormat::Kazoo);
        let kazoo_rw = RW.in_format(NodeFormat::Kazoo);
        let kazoo_read = "0b5c1b0e9c8e4f4c9a8e6f3c2b1a0d9e__rlock__0000000001";
        let kazoo_write = "0b5c1b0e9c8e4f4c9a8e6f3c2b1a0d9e__lock__0000000002";
        assert_eq!(kazoo_lock.other_recipe(kazoo_read), Some("a read/write lock's read side"));
        assert_eq!(kazoo_lock.other_recipe(kazoo_write), None);
        assert_eq!(kazoo_rw.other_recipe(kazoo_read), None);
        assert_eq!(kazoo_rw.other_recipe(kazoo_write), None);
        assert_eq!(
            [
                LOCK.recipe(),
                LATCH.recipe(),
                RW.recipe(),
                LEASE.recipe(),
                kazoo_lock.recipe(),
                kazoo_rw.recipe()
            ],
            ["lock", "leader latch", "read/write lock", "semaphore", "lock", "read/write lock"]
        );
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
    fn protection_prefixes_are_distinct_version_4_uuids() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let protection = LOCK.new_protection();
            let id = protection.strip_prefix("_c_").and_then(|p| p.strip_suffix('-')).unwrap();
            let id = uuid::Uuid::parse_str(id).unwrap();
            assert_eq!(id.get_version(), Some(uuid::Version::Random), "{protection}");
            assert_eq!(id.get_variant(), uuid::Variant::RFC4122, "{protection}");
            assert!(seen.insert(protection));
        }
        let kazoo = LOCK.in_format(NodeFormat::Kazoo).new_protection();
        assert_eq!(kazoo.len(), 32, "{kazoo}");
        assert!(kazoo.bytes().all(|b| b.is_ascii_hexdigit()), "{kazoo}");
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
    fn writes_sequences_as_zookeeper_does() {
        assert_eq!(sequence_text(42), "0000000042");
        assert_eq!(sequence_text(-5), "-000000005");
        assert_eq!(sequence_text(i32::MIN), "-2147483648");
        assert_eq!(sequence_text(i32::MAX), "2147483647");
        for seq in [0, 7, 42, -1, -5, 999_999_999, -999_999_999, 1_000_000_000, i32::MIN, i32::MAX] {
            let mut pushed = String::new();
            push_sequence_text(&mut pushed, seq);
            assert_eq!(pushed, sequence_text(seq), "{seq}");
        }
        // The order key at the width boundaries orders as the text.
        let edges = [
            i32::MIN,
            -2_147_483_647,
            -1_000_000_001,
            -1_000_000_000,
            -999_999_999,
            -214_748_365,
            -100_000_001,
            -100_000_000,
            -99_999_999,
            -10,
            -1,
            0,
            1,
            999_999_999,
            1_000_000_000,
            i32::MAX,
        ];
        for a in edges {
            for b in edges {
                assert_eq!(
                    text_order_key(a).cmp(&text_order_key(b)),
                    sequence_text(a).cmp(&sequence_text(b)),
                    "{a} {b}"
                );
            }
        }
        // Extra zero padding is not ZooKeeper's, and would sort differently as text.
        assert_eq!(parse_sequence("-0000000005"), None);
        assert_eq!(parse_sequence("-000000000"), None);
        assert_eq!(parse_sequence("-000000005"), Some(-5));
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

        proptest! {
            #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

            /// The allocation-free order key orders as the text does, and the canonical check
            /// accepts exactly the texts `sequence_text` writes.
            #[test]
            fn the_text_order_key_is_the_text_order(a in any::<i32>(), b in any::<i32>()) {
                prop_assert_eq!(
                    text_order_key(a).cmp(&text_order_key(b)),
                    sequence_text(a).cmp(&sequence_text(b)),
                    "{} {}", a, b
                );
                prop_assert_eq!(parse_sequence(&sequence_text(a)), Some(a));
                let mut pushed = String::from("x");
                push_sequence_text(&mut pushed, a);
                prop_assert_eq!(&pushed[1..], sequence_text(a));
            }

            /// Texts that look like sequences are accepted exactly when canonical.
            #[test]
            fn only_canonical_sequence_texts_parse(text in "-?[0-9]{8,12}") {
                let canonical = text.parse::<i32>().ok().filter(|seq| sequence_text(*seq) == text);
                prop_assert_eq!(parse_sequence(&text), canonical, "{}", text);
            }

            /// What parses as ours is never detected as the other format's: the queue engine
            /// checks only the children that do not parse for a format conflict.
            #[test]
            fn what_parses_as_ours_is_never_the_other_format(
                pieces in vec(prop::sample::select(vec![
                    "_c_", "abc", "lock-", "__lock__", "__rlock__", "latch-", "__READ__", "__WRIT__",
                    "lease-", "-", "_", "0000000001", "-000000005", "2147483647", "-2147483648", "12",
                ]), 1..6),
                scheme in 0usize..6,
            ) {
                let name: String = pieces.concat();
                let schemes = [
                    LOCK,
                    NameScheme::curator(&["latch-"]),
                    NameScheme::curator(&["__READ__", "__WRIT__"]),
                    NameScheme::curator(&["lease-"]),
                    LOCK.in_format(NodeFormat::Kazoo),
                    NameScheme::curator(&["__READ__", "__WRIT__"]).in_format(NodeFormat::Kazoo),
                ];
                let scheme = schemes[scheme];
                let one_pass = if scheme.parse(&name).is_some() {
                    None
                } else {
                    NodeFormat::detect(&name).filter(|f| *f != scheme.format)
                };
                let children = [name.clone()];
                prop_assert_eq!(
                    one_pass,
                    scheme.conflicting(&children).map(|c| NodeFormat::detect(c).unwrap()),
                    "{}", name
                );
            }

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
                    .map(|(i, s)| format!("_c_{}-lock-{s:010}", if same_uuid { "same".to_string() } else { format!("u{i}") }))
                    .collect();
                let mut children: Vec<String> = created.iter().cloned().chain(foreign).collect();
                children.sort_by_key(|c| c.bytes().fold(start as u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b))));
                let mut queue: Vec<QueueNode> = children.iter().filter_map(|c| LOCK.parse(c)).collect();
                let mut by_text = created.clone();
                by_text.sort_by_key(|name| (name.rsplit_once("lock-").map(|(_, seq)| seq.to_string()), name.clone()));
                match sort_queue(&mut queue, &LOCK, "/p") {
                    Ok(()) => {
                        let order: Vec<String> = queue.into_iter().map(|n| n.name).collect();
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
                let mut queue: Vec<QueueNode> =
                    seqs.iter().enumerate().filter_map(|(i, s)| scheme.parse(&format!("u{i}{marker}{s:010}"))).collect();
                prop_assert_eq!(queue.len(), seqs.len());
                if sort_queue(&mut queue, &scheme, "/p").is_ok() {
                    let texts: Vec<String> = queue.iter().map(|n| sequence_text(n.seq)).collect();
                    prop_assert!(texts.windows(2).all(|w| w[0] <= w[1]));
                }
            }
        }
    }
}
