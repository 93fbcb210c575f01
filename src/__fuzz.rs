//! **Not part of the API.** Hooks for the fuzz targets (`fuzz/`) and the parser property tests
//! (`tests/parsers_prop.rs`, `tests/fuzz_regressions.rs`): thin wrappers over the crate's private
//! readers of foreign input (child names, sequence suffixes, node data), so that they can be
//! driven from outside the crate without making the readers themselves public.
//!
//! Hidden from the documentation and exempt from semantic versioning: anything here may change
//! or go in any release, patch releases included. Don't use it.
//!
//! It is compiled in every build rather than behind a cargo feature: the property tests run in
//! plain `cargo test`, and a feature would have to be turned on for them (a `required-features`
//! test that `cargo test` skips silently) as well as for the fuzz crate. It adds no dependency
//! and nothing here runs unless called.

use crate::error::Error;
use crate::format::NodeFormat;
use crate::markers;
use crate::naming::{self, NameScheme};

/// A queue's naming scheme, as one recipe reads its path in one format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scheme(NameScheme);

impl Scheme {
    /// Every scheme a recipe reads, in both formats, with what reads it: the same values the
    /// recipes build (`NameScheme::curator(...)`, then `in_format`).
    pub fn all() -> Vec<(&'static str, Scheme)> {
        use markers::{LATCH, LEASE, LOCK, READ, WRITE};
        const CURATOR: [(&str, &[&str]); 5] = [
            ("mutex, semaphore mutex, selector", &[LOCK]),
            ("latch", &[LATCH]),
            ("read/write lock", &[READ, WRITE]),
            ("semaphore", &[LEASE]),
            ("leader observer", &[LATCH, LOCK]),
        ];
        let mut all = Vec::new();
        for format in [NodeFormat::Curator, NodeFormat::Kazoo] {
            for (what, markers) in CURATOR {
                // The leader observer reads kazoo's `Election` with the lock's marker alone.
                let markers: &'static [&'static str] =
                    if format == NodeFormat::Kazoo && markers == [LATCH, LOCK] { &[LOCK] } else { markers };
                all.push((what, Scheme(NameScheme::curator(markers).in_format(format))));
            }
        }
        all
    }

    /// The format whose names this scheme reads.
    pub fn format(self) -> NodeFormat {
        self.0.format
    }

    /// The markers of this queue's nodes, in the order [`Scheme::parse`]'s index refers to.
    pub fn markers(self) -> &'static [&'static str] {
        self.0.markers
    }

    /// What the queue is, for messages.
    pub fn recipe(self) -> &'static str {
        self.0.recipe()
    }

    /// A fresh protection prefix, as a create attempt makes one.
    pub fn new_protection(self) -> String {
        self.0.new_protection()
    }

    /// A child name read as one of this queue's nodes: `(sequence, marker index)`, or `None`
    /// for a node that is not part of the queue.
    pub fn parse(self, name: &str) -> Option<(i32, usize)> {
        self.0.parse(name).map(|node| (node.seq, node.marker))
    }

    /// The other recipe a child belongs to, if its name says so.
    pub fn other_recipe(self, name: &str) -> Option<&'static str> {
        self.0.other_recipe(name)
    }

    /// A listing as the queue reads it: its nodes (foreign children left out) in the order
    /// every client computes, or the queue's `Error::SequenceWrapped` (path `/fuzz`).
    ///
    /// # Errors
    /// [`Error::SequenceWrapped`] where that order is not creation order.
    pub fn sort(self, children: &[String]) -> Result<Vec<String>, Error> {
        let mut queue: Vec<_> = children.iter().filter_map(|c| self.0.parse(c)).collect();
        naming::sort_queue(&mut queue, &self.0, "/fuzz")?;
        Ok(queue.into_iter().map(|node| node.name.into_owned()).collect())
    }
}

/// Which format a child name was made by, if it looks like a queue node of either.
pub fn detect(name: &str) -> Option<NodeFormat> {
    NodeFormat::detect(name)
}

/// A sequence suffix, accepted only exactly as ZooKeeper writes it.
pub fn parse_sequence(text: &str) -> Option<i32> {
    naming::parse_sequence(text)
}

/// The suffix ZooKeeper writes for `seq` (`%010d`), as we write it for the node we created.
pub fn sequence_text(seq: i32) -> String {
    let mut text = String::new();
    naming::push_sequence_text(&mut text, seq);
    text
}

/// A queue node's data read as `(participant id, proclaimed value)`, as the participants list
/// and the leader observer read it.
pub fn split_data(data: &[u8]) -> (String, Vec<u8>) {
    naming::split_data(data)
}

/// The data we store for participant `id` proclaiming `value`.
pub fn join_data(id: &str, value: &[u8]) -> Vec<u8> {
    naming::join_data(id, value)
}

/// Whether node data is a revocation request (`__REVOKE__`), as a holder reads its own node.
pub fn is_revocation(data: &[u8]) -> bool {
    data == markers::REVOKE
}

/// How many leases a semaphore node named `name` holds, of at most `max`.
pub fn lease_weight(name: &str, max: u64) -> u64 {
    naming::lease_weight(name, max)
}
