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
//!
//! The files: `scheme.rs` builds our own names (a recipe's markers in a format, protection
//! prefixes) and holds [`QueueNode`]; `parse.rs` reads a child name (which format, which queue,
//! which sequence, which other recipe, a lease's weight); `sequence.rs` reads and writes the
//! sequence suffix and orders it as text; `sort.rs` orders a queue, or refuses once the counter
//! wrapped; `data.rs` reads and writes a node's data. This file only re-exports.

mod data;
mod parse;
mod scheme;
mod sequence;
mod sort;

pub use crate::format::NodeFormat;
pub use data::Party;
pub(crate) use data::{join_data, party_data, read_data, split_data};
pub(crate) use parse::lease_weight;
pub(crate) use scheme::{NameScheme, QueueNode};
#[cfg(test)]
pub(crate) use sequence::sequence_text;
pub(crate) use sequence::{parse_sequence, push_sequence_text};
pub(crate) use sort::sort_queue;
