//! The names on the wire that say what a node is: each recipe's queue marker, and the data a
//! revoker writes. Curator's names; kazoo's are derived by `naming`. This file imports nothing.

/// The data a revoker writes into a holder's node (Curator's `RevocationSpec` value).
pub(crate) const REVOKE: &[u8] = b"__REVOKE__";

/// The data a clean release writes into our node in the transaction that deletes it, when the
/// lock delay is on (`Conn::send_delete`): waiters see a data change rather than a deletion.
pub(crate) const RELEASED: &[u8] = b"__RELEASED__";

/// The suffix of a tombstone's name (see [`tombstone_of`]).
pub(crate) const TOMBSTONE: &str = ".released";

/// The path of the tombstone of the queue node at `node_path`: beside it, named by its sequence
/// suffix (unique under one parent) and [`TOMBSTONE`], `<parent>/0000000042.released`. A
/// holder admitted at the head of its queue (every node before its own gone) creates it and
/// deletes it again in the transaction that deletes its node (`Conn::send_delete`). Nobody ever
/// lists it; the waiter behind that node watches the name (an exists watch) and hears of its
/// creation just before the deletion: it is the head now, with no listing. Nothing else creates
/// such a name.
pub(crate) fn tombstone_of(node_path: &str) -> String {
    let digits = node_path.len() - node_path.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let name_at = node_path.rfind('/').map_or(0, |slash| slash + 1);
    // A name without a sequence suffix (none of ours) keeps its whole name.
    let from = if digits == 0 { name_at } else { node_path.len() - digits };
    let mut tomb = String::with_capacity(node_path.len() - from + name_at + TOMBSTONE.len());
    tomb.push_str(&node_path[..name_at]);
    tomb.push_str(&node_path[from.max(name_at)..]);
    tomb.push_str(TOMBSTONE);
    tomb
}

/// A mutex's, a semaphore mutex's and a leader selector's nodes: `_c_<uuid>-lock-<seq>`.
pub(crate) const LOCK: &str = "lock-";
/// A leader latch's nodes: `_c_<uuid>-latch-<seq>`.
pub(crate) const LATCH: &str = "latch-";
/// A read/write lock's readers: `_c_<uuid>-__READ__<seq>`.
pub(crate) const READ: &str = "__READ__";
/// A read/write lock's writers: `_c_<uuid>-__WRIT__<seq>`.
pub(crate) const WRITE: &str = "__WRIT__";
/// A semaphore's leases: `_c_<uuid>-lease-<seq>`, or `_c_<uuid>-w<n>-lease-<seq>` for `n`.
pub(crate) const LEASE: &str = "lease-";

/// The index of [`WRITE`] among a read/write queue's markers (`[READ, WRITE]`).
pub(crate) const WRITER: usize = 1;

#[cfg(test)]
mod tests {
    #[test]
    fn a_tombstone_is_named_by_its_nodes_sequence() {
        assert_eq!(super::tombstone_of("/a/b/_c_x-lock-0000000042"), "/a/b/0000000042.released");
        assert_eq!(super::tombstone_of("/l/_c_x-__WRIT__-000000005"), "/l/000000005.released");
        assert_eq!(super::tombstone_of("/l/lock"), "/l/lock.released");
    }
}
