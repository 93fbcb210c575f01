//! Our own names: which markers a recipe's queue contains in each format, the protection prefix
//! of a create attempt, what a recipe is called, and [`QueueNode`], a name read as a queue's.

use crate::format::NodeFormat;
use std::borrow::Cow;

impl NodeFormat {
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
}

/// Every queue marker of `format`, with what a node carrying it belongs to (as said of a node
/// found, and as said of our own queue).
pub(super) fn recipe_kinds(format: NodeFormat) -> &'static [(&'static str, (&'static str, &'static str))] {
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

/// A parsed queue node: a child name read as a queue's. The engine's decisions borrow the
/// name from the listing it came in (a listing of N names is read without N copies: memory per
/// waiter); what keeps nodes past their listing (`inspect`) owns them ([`QueueNode::owned`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct QueueNode<'a> {
    /// The child name, without the parent path.
    pub name: Cow<'a, str>,
    /// The sequence number.
    pub seq: i32,
    /// Index of its marker in [`NameScheme::markers`].
    pub marker: usize,
}

impl QueueNode<'_> {
    /// The same node, its name owned: kept past the listing it was read from.
    pub fn owned(self) -> QueueNode<'static> {
        QueueNode { name: Cow::Owned(self.name.into_owned()), seq: self.seq, marker: self.marker }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCK: NameScheme = NameScheme::curator(&["lock-"]);

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
}
