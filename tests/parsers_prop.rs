//! The parsers of foreign input, property-tested on the real grammars: node
//! names as Curator (`_c_<36-char uuid>-lock-<%010d>`, `-latch-`, `-__READ__`, `-__WRIT__`),
//! kazoo (`<32 hex>__lock__<%010d>`, `__rlock__`) and we (the same, plus `-w<n>-lease-`) write
//! them, with sequence numbers near the signed wrap; off-by-one variants of each (short and long
//! uuids, missing dashes, non-hex, multibyte UTF-8 at every separator); listings that mix them
//! with foreign, corrupt and empty names; node data; lock paths.
//!
//! Strategies anchored on the grammar reach the parsers' edge cases (a character boundary next
//! to a marker, a sign inside the suffix) that an unanchored `\PC*` string almost never does.
//! Every input also runs the fuzz targets' own checks (`fuzz/src/lib.rs`, an independent reading
//! of each grammar). No ZooKeeper server is needed.
//!
//! `cargo test --test parsers_prop -- --ignored write_seed_corpora` rewrites the fuzz targets'
//! seed corpora (`fuzz/corpus/`) from these strategies.

#[path = "../fuzz/src/lib.rs"]
mod checks;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use zk_recipes::__fuzz::{self, Scheme};
use zk_recipes::{Error, NodeFormat};

/// Characters that break byte arithmetic on names: multibyte UTF-8 of each width, the grammar's
/// own separators and digits, a NUL, digits that are not ASCII.
const TRICKY: &[char] = &[
    'é',
    'ß',
    '日',
    '€',
    '🦀',
    '\u{10ffff}',
    '\u{0}',
    '\n',
    '-',
    '_',
    ' ',
    '+',
    '0',
    '9',
    'g',
    'F',
    '\u{ff10}',
    '\u{663}',
    '\u{200b}',
];

/// Sequence numbers near the edges: the signed wrap, zero, the widths of `%010d`, and anywhere.
fn seq() -> impl Strategy<Value = i32> {
    prop_oneof![
        Just(i32::MAX),
        Just(i32::MIN),
        Just(-1),
        Just(0),
        (0..1000).prop_map(|d| i32::MAX - d),
        (0..1000).prop_map(|d| i32::MIN + d),
        -1000..1000,
        -1_000_000_010..-999_999_990,
        999_999_990..1_000_000_010,
        -100_000_010..-99_999_990,
        any::<i32>(),
    ]
}

/// Suffix texts: canonical ones, and the near misses (widths, overflow, signs, padding).
fn seq_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => seq().prop_map(|s| format!("{s:010}")),
        1 => "[0-9]{9}|[0-9]{11}|-[0-9]{8}|-[0-9]{10,11}|[0-9]{10}",
        1 => select(vec![
            "9999999999", "2147483648", "-2147483649", "4294967295", "-0000000005", "-000000000",
            "+000000001", " 000000001", "000000001 ", "00000000001", "--000000001", "", "-",
        ])
        .prop_map(str::to_string),
        1 => seq().prop_map(|s| format!("{s:011}")),
        1 => seq().prop_map(|s| format!("{s:+010}")),
        2 => seq().prop_flat_map(|s| mutated(format!("{s:010}"))),
    ]
}

/// `text` as is, or with one character deleted, inserted (a [`TRICKY`] one, at any character
/// boundary), replaced or doubled: the off-by-one variants.
fn mutated(text: String) -> impl Strategy<Value = String> {
    let chars: Vec<char> = text.chars().collect();
    let n = chars.len();
    (0..4u8, 0..=n, select(TRICKY)).prop_map(move |(how, at, c)| {
        let mut out = chars.clone();
        match how {
            0 if at < n => {
                out.remove(at);
            }
            1 => out.insert(at, c),
            2 if at < n => out[at] = c,
            3 if at < n => out.insert(at, chars[at]),
            _ => {}
        }
        out.into_iter().collect()
    })
}

/// Curator's protection prefix, `_c_` + `UUID.randomUUID()` + `-`.
fn curator_protection() -> impl Strategy<Value = String> {
    "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}".prop_map(|u| format!("_c_{u}-"))
}

/// kazoo's, `uuid.uuid4().hex`.
fn kazoo_protection() -> impl Strategy<Value = String> {
    "[0-9a-f]{32}"
}

/// A scheme (recipe and format) by index into [`Scheme::all`].
fn scheme() -> impl Strategy<Value = (&'static str, Scheme)> {
    select(Scheme::all())
}

/// A valid name in `scheme`'s grammar: `(name, seq, marker index)`. The protection is the real
/// peer's (random uuid), or the one the library makes for its own creates.
fn valid_name(scheme: Scheme) -> impl Strategy<Value = (String, i32, usize)> {
    let protection = if scheme.format() == NodeFormat::Kazoo {
        prop_oneof![kazoo_protection(), Just(()).prop_map(move |()| scheme.new_protection())].boxed()
    } else {
        prop_oneof![curator_protection(), Just(()).prop_map(move |()| scheme.new_protection())].boxed()
    };
    let lease_weight = prop_oneof![Just(String::new()), (1u32..100).prop_map(|w| format!("w{w}-"))];
    (protection, lease_weight, 0..scheme.markers().len(), seq()).prop_map(move |(p, w, m, s)| {
        let marker = scheme.markers()[m];
        // Our semaphore's weighted leases: `_c_<uuid>-w<n>-lease-<seq>`.
        let w = if marker == "lease-" { w } else { String::new() };
        (format!("{p}{w}{marker}{s:010}"), s, m)
    })
}

/// Any name near `scheme`'s grammar: a protection (valid or mutated) of either format, one of
/// every recipe's markers (or none), and a suffix text; then one more mutation anywhere.
fn near_name() -> impl Strategy<Value = String> {
    let protection = prop_oneof![
        curator_protection().prop_flat_map(mutated),
        kazoo_protection().prop_flat_map(mutated),
        Just(String::new()),
        Just("_c_".to_string()),
    ];
    let marker = select(vec![
        "lock-",
        "latch-",
        "__READ__",
        "__WRIT__",
        "lease-",
        "w2-lease-",
        "__lock__",
        "__rlock__",
        "",
    ]);
    (protection, marker, seq_text()).prop_flat_map(|(p, m, s)| mutated(format!("{p}{m}{s}")))
}

/// Children that are not a queue's nodes: plain names, empty ones, corrupt suffixes.
fn foreign() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[a-z_-]{0,20}", "\\PC{0,30}", near_name(),]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// A name in a scheme's grammar parses back to its sequence and marker, is detected as its
    /// format, and is nobody else's recipe.
    #[test]
    fn a_valid_name_parses_back(
        (scheme, (name, seq, marker)) in scheme().prop_flat_map(|(_, s)| (Just(s), valid_name(s)))
    ) {
        prop_assert_eq!(scheme.parse(&name), Some((seq, marker)), "{}", name);
        prop_assert_eq!(__fuzz::detect(&name), Some(scheme.format()), "{}", name);
        prop_assert_eq!(scheme.other_recipe(&name), None, "{}", name);
        checks::child_name(name.as_bytes());
    }

    /// The same name with any multibyte or off-by-one change at any position, including right
    /// after `_c_` and around every separator: no panic, and read exactly as the grammar says
    /// (the fuzz checks compare with an independent reading).
    #[test]
    fn a_mutated_name_is_read_as_the_grammar_says(
        name in scheme().prop_flat_map(|(_, s)| valid_name(s)).prop_flat_map(|(n, _, _)| mutated(n)),
    ) {
        checks::child_name(name.as_bytes());
    }

    /// Names assembled from any protection, marker and suffix text near the grammar.
    #[test]
    fn names_near_the_grammar_are_read_as_it_says(name in near_name()) {
        checks::child_name(name.as_bytes());
    }

    /// A corrupt suffix after a valid protection and marker is rejected, never read as some
    /// other number.
    #[test]
    fn a_corrupt_suffix_is_rejected(
        (scheme, (name, _, _)) in scheme().prop_flat_map(|(_, s)| (Just(s), valid_name(s))),
        text in seq_text(),
    ) {
        let cut = name.len() - format!("{:010}", scheme.parse(&name).unwrap().0).len();
        let name = format!("{}{text}", &name[..cut]);
        let expected = checks::canonical_sequence(&text);
        prop_assert_eq!(scheme.parse(&name).map(|(seq, _)| seq), expected, "{}", name);
        prop_assert_eq!(__fuzz::parse_sequence(&text), expected, "{}", text);
    }

    /// Suffix texts: parsed exactly when canonical; written back as ZooKeeper writes them.
    #[test]
    fn sequence_texts_parse_exactly_when_canonical(text in seq_text(), s in seq()) {
        checks::sequence(text.as_bytes());
        checks::sequence(&s.to_le_bytes());
    }

    /// A queue created under one scheme from any point of the counter (so across the signed
    /// wrap), shuffled among foreign, corrupt and empty children: either ordered in creation
    /// order, exactly when that is the text order Curator and kazoo sort by (and kazoo can see
    /// every node), or refused naming one of the queue's nodes. The same for any order of the
    /// listing.
    #[test]
    fn a_queue_sorts_in_creation_order_or_is_refused(
        (_, scheme) in scheme(),
        start in seq(),
        steps in vec(1u32..5000, 0..40),
        markers in vec(0usize..2, 41),
        foreign in vec(foreign(), 0..12),
        shuffle in any::<u64>(),
    ) {
        let mut seqs = vec![start];
        for step in steps {
            seqs.push(seqs[seqs.len() - 1].wrapping_add(step as i32));
        }
        let created: Vec<String> = seqs
            .iter()
            .zip(&markers)
            .map(|(s, m)| {
                let marker = scheme.markers()[m % scheme.markers().len()];
                format!("{}{marker}{s:010}", scheme.new_protection())
            })
            .collect();
        let foreign: Vec<String> = foreign.into_iter().filter(|f| scheme.parse(f).is_none()).collect();
        let mut listing: Vec<String> = created.iter().chain(&foreign).cloned().collect();
        shuffled(&mut listing, shuffle);
        let mut by_text = created.clone();
        by_text.sort_by_key(|n| format!("{:010}", scheme.parse(n).unwrap().0));
        let unseen_by_kazoo =
            scheme.format() == NodeFormat::Kazoo && seqs.iter().any(|s| (-999_999_999..0).contains(s));
        let sorted = scheme.sort(&listing);
        match &sorted {
            Ok(order) => {
                prop_assert_eq!(order, &created);
                prop_assert_eq!(&by_text, &created);
                prop_assert!(!unseen_by_kazoo);
            }
            Err(Error::SequenceWrapped { node, .. }) => {
                prop_assert!(created.contains(node), "refused {} of nobody's", node);
                prop_assert!(by_text != created || unseen_by_kazoo, "refused a queue in creation order");
            }
            Err(other) => prop_assert!(false, "unexpected error {}", other),
        }
        shuffled(&mut listing, shuffle.rotate_left(17));
        prop_assert_eq!(format!("{sorted:?}"), format!("{:?}", scheme.sort(&listing)));
        checks::children(listing.join("/").as_bytes());
    }

    /// Any listing of names near the grammars (repeated sequences, both formats, any marker):
    /// the order is a total order (text of the sequence, then name), the same for any order of
    /// the listing, and sorting a sorted queue changes nothing.
    #[test]
    fn sorting_is_a_total_order(names in vec(prop_oneof![near_name(), foreign()], 0..20)) {
        checks::children(names.join("/").as_bytes());
        for (what, scheme) in Scheme::all() {
            if let Ok(order) = scheme.sort(&names) {
                prop_assert_eq!(scheme.sort(&order).ok(), Some(order.clone()), "{}", what);
            }
        }
    }

    /// Node data: `<id>` or `<id>\n<value>`, as a participant writes it and anyone else may.
    #[test]
    fn node_data_splits_at_the_first_newline(
        id in "[^\n]{0,20}",
        value in vec(any::<u8>(), 0..40),
        raw in vec(any::<u8>(), 0..60),
    ) {
        let joined = __fuzz::join_data(&id, &value);
        prop_assert_eq!(__fuzz::split_data(&joined), (id, value));
        checks::node_data(&joined);
        checks::node_data(&raw);
        checks::node_data(b"__REVOKE__");
    }

    /// Lock paths built from segments near the rules: valid exactly when every rule holds.
    #[test]
    fn lock_paths_are_valid_exactly_when_every_rule_holds(
        lead in select(vec!["/", "", "//"]),
        segments in vec(select(vec![
            "a", "locks", ".", "..", "", "zookeeper", "日本", "é", "a.b", "\u{7}", "\u{0}", "\u{7f}",
            "\u{9f}", "\u{a0}", "\u{e000}", "\u{f8ff}", "\u{fff0}", "\u{10000}", "🦀", " ",
        ]), 0..6),
        trail in select(vec!["", "/"]),
    ) {
        let path = format!("{lead}{}{trail}", segments.join("/"));
        checks::lock_path(path.as_bytes());
    }
}

/// A deterministic shuffle (the test's input decides it, so a failure replays).
fn shuffled(items: &mut [String], seed: u64) {
    let mut state = seed | 1;
    for i in (1..items.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        items.swap(i, (state % (i as u64 + 1)) as usize);
    }
}

/// Rewrites the fuzz targets' seed corpora (`fuzz/corpus/<target>/seed-<n>`) from the
/// strategies above, deterministically. Run by hand after a grammar changes.
#[test]
#[ignore = "writes into fuzz/corpus/; run by hand"]
fn write_seed_corpora() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let mut sample = |strategy: BoxedStrategy<Vec<u8>>, n: usize| -> Vec<Vec<u8>> {
        (0..n).map(|_| strategy.new_tree(&mut runner).unwrap().current()).collect()
    };
    let valid =
        || scheme().prop_flat_map(|(_, s)| valid_name(s)).prop_map(|(n, _, _)| n.into_bytes()).boxed();
    let corpora: Vec<(&str, Vec<Vec<u8>>)> = vec![
        (
            "child_name",
            [sample(valid(), 6), sample(near_name().prop_map(String::into_bytes).boxed(), 6)].concat(),
        ),
        ("sequence", sample(seq_text().prop_map(String::into_bytes).boxed(), 10)),
        (
            "children",
            sample(
                vec(prop_oneof![valid(), near_name().prop_map(String::into_bytes)], 1..6)
                    .prop_map(|names| names.join(&b'/'))
                    .boxed(),
                8,
            ),
        ),
        (
            "node_data",
            vec![
                b"worker-1".to_vec(),
                b"worker-1\nhttp://10.0.0.1:8080".to_vec(),
                b"__REVOKE__".to_vec(),
                b"\xff\xfe\n\n".to_vec(),
                Vec::new(),
            ],
        ),
        (
            "lock_path",
            vec![
                b"/locks/orders".to_vec(),
                b"/zookeeper/x".to_vec(),
                "/日本/ロック".as_bytes().to_vec(),
                b"/a/../b".to_vec(),
                b"curator".to_vec(),
                b"KAZOO".to_vec(),
            ],
        ),
    ];
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    for (target, inputs) in corpora {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir).unwrap();
        for (i, input) in inputs.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:02}")), input).unwrap();
        }
    }
}
