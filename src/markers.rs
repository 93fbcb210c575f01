//! The names on the wire that say what a node is: each recipe's queue marker, and the data a
//! revoker writes. Curator's names; kazoo's are derived by `naming`. This file imports nothing.

/// The data a revoker writes into a holder's node (Curator's `RevocationSpec` value).
pub(crate) const REVOKE: &[u8] = b"__REVOKE__";

/// The data a clean release writes into our node in the transaction that deletes it, when the
/// lock delay is on (`Conn::send_delete`): waiters see a data change rather than a deletion.
pub(crate) const RELEASED: &[u8] = b"__RELEASED__";

/// The suffix of a tombstone's name: a holder admitted at the head of its queue (every node
/// before its own gone) creates `<its node's name>.released` and deletes it again in the
/// transaction that deletes its node (`Conn::send_delete`). Nobody ever lists it; a waiter
/// behind that node watches the name (an exists watch) and hears of its creation just before
/// the deletion: it is the head now, with no listing. Nothing else creates such a name.
pub(crate) const TOMBSTONE: &str = ".released";

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
