//! Reading a child name: which format made it, whether it is one of a queue's nodes (and with
//! which marker and sequence), which other recipe it belongs to, and a semaphore lease's weight.
//! Every name here is foreign input: anyone with write access to the path can create one.

use super::scheme::{recipe_kinds, NameScheme, QueueNode};
use super::sequence::parse_sequence;
use crate::format::NodeFormat;
use crate::markers::LEASE;

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
}

impl NameScheme {
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
    pub fn parse<'a>(&self, name: &'a str) -> Option<QueueNode<'a>> {
        // The last occurrence of any marker, as Curator's `lastIndexOf(lockName)`.
        let (marker, at) = self
            .markers
            .iter()
            .enumerate()
            .filter_map(|(i, m)| name.rfind(m).map(|at| (i, at + m.len())))
            .max_by_key(|&(_, at)| at)?;
        let seq = parse_sequence(&name[at..])?;
        Some(QueueNode { name: name.into(), seq, marker })
    }
}

/// How many leases a semaphore node holds, from its name: `_c_<uuid>-w<n>-lease-<seq>` holds
/// `n`; a lease node without the weight holds one. A weight that can't be read, or is 0 or above
/// `max` (a foreign or corrupt node), counts as `max`: it is never under-counted, so it can never
/// make a semaphore over-admit.
pub(crate) fn lease_weight(name: &str, max: u64) -> u64 {
    let head = name.rfind(&format!("-{LEASE}")).map_or("", |at| &name[..at]);
    match head.rsplit_once("-w") {
        None => 1,
        Some((_, n)) => match n.parse::<u64>() {
            Ok(w) if (1..=max).contains(&w) => w,
            _ => max,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCK: NameScheme = NameScheme::curator(&["lock-"]);

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
    fn lease_weights_are_read_or_counted_as_the_maximum() {
        let id = "_c_0b5c1b0e-9c8e-4f4c-9a8e-6f3c2b1a0d9e";
        assert_eq!(lease_weight(&format!("{id}-w3-lease-0000000001"), 5), 3);
        assert_eq!(lease_weight(&format!("{id}-lease-0000000001"), 5), 1);
        for corrupt in ["-w0-lease-", "-w6-lease-", "-wx-lease-", "-w-lease-", "-w\u{ff13}-lease-"] {
            assert_eq!(lease_weight(&format!("{id}{corrupt}0000000001"), 5), 5, "{corrupt}");
        }
        // Read as Rust reads a number: a `+` sign or zero padding is taken (never written by us;
        // it claims no more than it holds).
        assert_eq!(lease_weight(&format!("{id}-w+3-lease-0000000001"), 5), 3);
        assert_eq!(lease_weight(&format!("{id}-w03-lease-0000000001"), 5), 3);
    }

    mod fuzz {
        use proptest::collection::vec;
        use proptest::prelude::*;

        use super::super::*;
        use super::LOCK;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

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
        }
    }
}
