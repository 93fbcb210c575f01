//! What the fuzz targets found, replayed in `cargo test`: every crashing
//! input, written here literally, through the same checks the targets run (`fuzz/src/lib.rs`,
//! included as a module), and every seed of the targets' corpora (`fuzz/corpus/<target>/`).
//!
//! A crash found by `scripts/fuzz` (saved as `fuzz/artifacts/<target>/crash-*`) becomes a
//! `#[test]` here with its bytes, which fails without the fix.

#[path = "../fuzz/src/lib.rs"]
mod checks;

/// What a fuzz target runs on one input.
type Check = fn(&[u8]);

/// Each fuzz target's checks, by target name (`fuzz/fuzz_targets/<name>.rs`).
const TARGETS: &[(&str, Check)] = &[
    ("child_name", checks::child_name),
    ("sequence", checks::sequence),
    ("children", checks::children),
    ("node_data", checks::node_data),
    ("lock_path", checks::lock_path),
];

/// Every seed of every target's corpus passes its target's checks, and every target has seeds.
#[test]
fn the_seed_corpora_pass_their_checks() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    for (target, check) in TARGETS {
        let dir = root.join(target);
        let mut seeds = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            check(&std::fs::read(&path).unwrap());
            seeds += 1;
        }
        assert!(seeds >= 5, "{target}: only {seeds} seeds in {}", dir.display());
    }
}

/// Every target is on the list above, and every listed target exists.
#[test]
fn every_fuzz_target_is_replayed() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/fuzz_targets");
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path().file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    found.sort();
    let mut listed: Vec<String> = TARGETS.iter().map(|(t, _)| t.to_string()).collect();
    listed.sort();
    assert_eq!(found, listed);
}

/// Found by `tests/parsers_prop.rs` (`sorting_is_a_total_order`): in the kazoo format, a listing
/// with two nodes kazoo can't see (`-000000001`, `-217483648`: nine digits after the sign) was
/// refused naming whichever came first in the listing, and ZooKeeper lists children in no set
/// order: two clients, or two reads, named different nodes. The refusal now names the first in
/// the queue's order, whatever the listing's.
#[test]
fn a_kazoo_refusal_names_the_same_node_for_any_listing_order() {
    let listing = ["a00000aaaa0a33f21bf4da36b72ec4__rlock__-000000001", "_c___lock__-217483648"];
    checks::children(listing.join("/").as_bytes());
    let forward: Vec<String> = listing.iter().map(|s| s.to_string()).collect();
    let backward: Vec<String> = listing.iter().rev().map(|s| s.to_string()).collect();
    for (what, scheme) in zk_recipes::__fuzz::Scheme::all() {
        let (a, b) = (scheme.sort(&forward), scheme.sort(&backward));
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "{what}");
    }
    // And the queue it shrank from (kazoo's lock, `-999999992` then `-999999991`): in either
    // listing order, the node named is the first in the queue's (text) order.
    let queue = [
        "1ea05e4ed75d484e923a163831711372__lock__-999999992",
        "1ea05e4ed75d484e923a163831711373__lock__-999999991",
    ];
    for listing in [queue.to_vec(), queue.iter().rev().copied().collect()] {
        checks::children(listing.join("/").as_bytes());
        let listing: Vec<String> = listing.iter().map(|s| s.to_string()).collect();
        for (what, scheme) in zk_recipes::__fuzz::Scheme::all() {
            if scheme.format() == zk_recipes::NodeFormat::Kazoo {
                match scheme.sort(&listing) {
                    Err(zk_recipes::Error::SequenceWrapped { node, .. }) => {
                        assert_eq!(node, queue[1], "{what}")
                    }
                    other => panic!("{what}: {other:?}"),
                }
            }
        }
    }
}
