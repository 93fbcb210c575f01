//! ZooKeeper coordination recipes: a fair, herd-free, reentrant [`InterProcessMutex`] with
//! fencing tokens and a lost-lock signal, on one queue engine that every recipe shares.
//!
//! Every contender creates an EPHEMERAL_SEQUENTIAL node under the lock path, named the Curator
//! way (`_c_<uuid>-lock-<seq>`), and watches only the node ahead of it. Locks are released when
//! the holder releases, drops its guard, or its session ends.
//!
//! Safety beyond the classic recipe:
//! * the holder is told when it may have lost the lock ([`LockGuard::status`], [`LockGuard::lost`]);
//! * every hold has a fencing token ([`LockGuard::fencing_token`]) and can make fenced writes
//!   ([`LockGuard::fenced_writer`]);
//! * a dropped acquire future never leaves a node behind;
//! * a connection loss during create is recovered by the protection prefix, and a node from
//!   another (older) session is never taken for ours.

mod connect;
mod error;
mod guard;
mod hold;
mod identity;
mod leader;
mod lock;
mod lock_core;
mod metrics;
mod multi_lock;
mod mutex;
mod naming;
mod options;
mod participants;
mod path;
mod queue;
mod revocation;
mod rwlock;
mod semaphore;
mod semaphore_mutex;
mod session;
mod status;
#[cfg(feature = "tls")]
mod tls;

pub use connect::ConnectOptions;
pub use error::{is_connection_loss, Error, PathError, Result};
pub use guard::{FencedWriter, LockGuard};
pub use identity::default_participant_id;
pub use leader::{
    LatchOptions, LeaderLatch, LeaderSelector, Leadership, LeadershipContext, SelectorOptions, TermEnded,
    TermOutcome,
};
pub use lock::{Lock, LockExt};
pub use multi_lock::InterProcessMultiLock;
pub use mutex::InterProcessMutex;
pub use naming::NodeFormat;
pub use options::LockOptions;
pub use participants::Participant;
pub use path::LockPath;
pub use queue::QueueStats;
pub use revocation::request_revocation;
pub use rwlock::{InterProcessReadWriteLock, ReadLock, WriteLock};
pub use semaphore::InterProcessSemaphore;
pub use semaphore_mutex::InterProcessSemaphoreMutex;
pub use session::{ConnectionState, Session, SessionStatus};
pub use status::{LockStatus, LossPolicy};
#[cfg(feature = "tls")]
pub use tls::TlsConfig;
pub use zookeeper_client;

/// The README's examples, compiled as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
