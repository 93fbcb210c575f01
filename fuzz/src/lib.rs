//! The checks every fuzz target runs on one input, shared with `tests/fuzz_regressions.rs`
//! (which includes this file as a module), so that a crash found by `cargo fuzz` replays in
//! plain `cargo test`.
//!
//! Each function takes the raw input bytes, feeds the parsers of one family through the
//! library's hidden hooks (`zk_recipes::__fuzz`), and panics if a parser panics or breaks a
//! property checked against an independent reading of the grammar written here. Names reach the
//! library as Rust strings (the client decodes them as UTF-8), so bytes are read lossily.

use zk_recipes::__fuzz::{self, Scheme};
use zk_recipes::{Error, LockPath, NodeFormat};

/// ZooKeeper's sequence suffix, read independently of the library: the text of an `i32`
/// exactly as `%010d` writes it, or nothing.
pub fn canonical_sequence(text: &str) -> Option<i32> {
    let seq: i32 = text.parse().ok()?;
    (format!("{seq:010}") == text).then_some(seq)
}

/// A child name read independently of the library: the marker occurrence that ends last
/// (overlapping occurrences included, as Curator's `lastIndexOf`), followed by a canonical
/// sequence and nothing else.
pub fn expected_parse(markers: &[&str], name: &str) -> Option<(i32, usize)> {
    let bytes = name.as_bytes();
    let mut last: Option<(usize, usize)> = None;
    for (index, marker) in markers.iter().enumerate() {
        let m = marker.as_bytes();
        for start in (0..bytes.len()).filter(|&s| bytes[s..].starts_with(m)) {
            let end = start + m.len();
            if last.is_none_or(|(e, _)| end > e) {
                last = Some((end, index));
            }
        }
    }
    let (end, index) = last?;
    // Every marker is ASCII, so `end` is a character boundary.
    canonical_sequence(&name[end..]).map(|seq| (seq, index))
}

/// One child name, under every scheme: parse (checked against [`expected_parse`]), format
/// detection, other-recipe detection and a lease's weight.
pub fn child_name(data: &[u8]) {
    let name = String::from_utf8_lossy(data);
    let detected = __fuzz::detect(&name);
    for (what, scheme) in Scheme::all() {
        let parsed = scheme.parse(&name);
        assert_eq!(
            parsed,
            expected_parse(scheme.markers(), &name),
            "{what} ({}) read {name:?}",
            scheme.format()
        );
        if parsed.is_some() {
            // What parses as ours is never the other format's, nor another recipe's: the queue
            // checks only the children that do not parse for a conflict.
            assert_ne!(detected, Some(other(scheme.format())), "{what}: {name:?}");
            assert_eq!(scheme.other_recipe(&name), None, "{what}: {name:?}");
        }
        let _ = scheme.recipe();
    }
    let max = u64::from(data.first().copied().unwrap_or(1).max(1));
    let weight = __fuzz::lease_weight(&name, max);
    assert!((1..=max).contains(&weight), "{name:?} weighs {weight} of {max}");
}

fn other(format: NodeFormat) -> NodeFormat {
    if format == NodeFormat::Kazoo {
        NodeFormat::Curator
    } else {
        NodeFormat::Kazoo
    }
}

/// A sequence suffix: parsed exactly when canonical, and written back to the same text; and the
/// first four bytes as an `i32` round-trip through the text we write.
pub fn sequence(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let parsed = __fuzz::parse_sequence(&text);
    assert_eq!(parsed, canonical_sequence(&text), "{text:?}");
    if let Some(seq) = parsed {
        assert_eq!(__fuzz::sequence_text(seq), text, "{seq}");
    }
    if let Some(bytes) = data.get(..4) {
        let seq = i32::from_le_bytes(bytes.try_into().unwrap());
        let written = __fuzz::sequence_text(seq);
        assert_eq!(written, format!("{seq:010}"));
        assert_eq!(__fuzz::parse_sequence(&written), Some(seq), "{written}");
    }
}

/// A listing (children separated by `/`, which no name can hold), under every scheme: the
/// queue's order is the sequence text order, the same for any order of the listing, creation
/// order when no sequence is negative, and a refusal names one of the queue's own nodes.
pub fn children(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let listing: Vec<String> = text.split('/').map(str::to_string).collect();
    let reversed: Vec<String> = listing.iter().rev().cloned().collect();
    for (what, scheme) in Scheme::all() {
        let ours: Vec<(String, i32)> =
            listing.iter().filter_map(|c| scheme.parse(c).map(|(seq, _)| (c.clone(), seq))).collect();
        let sorted = scheme.sort(&listing);
        match &sorted {
            Ok(order) => {
                assert_eq!(order.len(), ours.len(), "{what}: {listing:?}");
                let keys: Vec<(String, &String)> = order
                    .iter()
                    .map(|name| (format!("{:010}", scheme.parse(name).expect("a queue node").0), name))
                    .collect();
                assert!(keys.windows(2).all(|w| w[0] <= w[1]), "{what}: not in text order: {order:?}");
                if scheme.format() == NodeFormat::Kazoo {
                    // kazoo can't see `-000000005`: such a node is refused, never ordered.
                    assert!(
                        ours.iter().all(|(_, seq)| !(-999_999_999..0).contains(seq)),
                        "{what}: {order:?}"
                    );
                }
            }
            Err(Error::SequenceWrapped { path, node }) => {
                assert_eq!(path, "/fuzz");
                assert!(ours.iter().any(|(name, _)| name == node), "{what}: refused {node:?}, not ours");
                assert!(ours.iter().any(|(_, seq)| *seq < 0), "{what}: refused without a wrap: {listing:?}");
            }
            Err(other) => panic!("{what}: unexpected error {other}"),
        }
        let again = scheme.sort(&reversed);
        assert_eq!(format!("{sorted:?}"), format!("{again:?}"), "{what}: the order depends on the listing's");
    }
}

/// Node data: split into the participant id and the proclaimed value at the first newline (as
/// the participants list and the leader observer read it), joined back, and the revocation
/// check.
pub fn node_data(data: &[u8]) {
    let (id, value) = __fuzz::split_data(data);
    assert!(!id.contains('\n'), "{data:?}");
    match data.iter().position(|b| *b == b'\n') {
        Some(at) => {
            assert_eq!(id, String::from_utf8_lossy(&data[..at]));
            assert_eq!(value, &data[at + 1..]);
            if std::str::from_utf8(&data[..at]).is_ok() {
                assert_eq!(__fuzz::join_data(&id, &value), data);
            }
        }
        None => {
            assert_eq!(id, String::from_utf8_lossy(data));
            assert!(value.is_empty());
        }
    }
    assert_eq!(__fuzz::is_revocation(data), data == b"__REVOKE__");
}

/// A lock path (and a node format's name, the other text a user passes): valid exactly when
/// every rule holds, checked against a reading of the rules written here; never a panic.
pub fn lock_path(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let valid = {
        let refused = |c: char| {
            matches!(c, '\0'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}')
                || matches!(c, '\u{fff0}'..='\u{ffff}')
        };
        text.len() <= LockPath::MAX_LEN
            && text.starts_with('/')
            && text.len() > 1
            && !text.ends_with('/')
            && !text.chars().any(refused)
            && text[1..].split('/').all(|s| !s.is_empty() && s != "." && s != "..")
            && text != "/zookeeper"
            && !text.starts_with("/zookeeper/")
    };
    match LockPath::new(text.as_ref()) {
        Ok(path) => {
            assert!(valid, "accepted {text:?}");
            assert_eq!(path.as_str(), text);
        }
        Err(Error::InvalidPath { path, .. }) => {
            assert!(!valid, "refused {text:?}");
            assert_eq!(path, text);
        }
        Err(other) => panic!("{text:?}: unexpected error {other}"),
    }
    if let Ok(format) = text.parse::<NodeFormat>() {
        assert!(format.to_string().eq_ignore_ascii_case(&text), "{text:?}");
    }
}
