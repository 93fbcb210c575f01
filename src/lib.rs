#![warn(missing_docs)]
//! ZooKeeper coordination recipes for async Rust: a fair, herd-free mutex with fencing tokens,
//! leader election, a read/write lock, a semaphore and a multi-lock, on one queue engine, all
//! built from one self-healing [`Session`].
//!
//! ```no_run
//! use std::time::Duration;
//! use zk_recipes::{InterProcessMutex, LockStatus, Session};
//!
//! # async fn demo() -> zk_recipes::Result<()> {
//! // One session per process: it starts a new ZooKeeper session by itself after an expiry.
//! let session = Session::connect("zk1:2181,zk2:2181,zk3:2181", Duration::from_secs(10)).await?;
//!
//! // A lock per resource; acquiring waits in a FIFO queue, watching only the node ahead.
//! let mutex = InterProcessMutex::new(&session, "/locks/stock/sku-42")?;
//! let guard = mutex.acquire().await?;
//!
//! // The fencing token grows from holder to holder: the resource refuses older ones.
//! let token = guard.fencing_token();
//!
//! // A fenced write commits only while our lock node exists.
//! let mut write = guard.fenced_writer()?;
//! write.add_set_data("/stock/sku-42", format!("41 by {token}").as_bytes(), None)?;
//! write.commit().await?;
//!
//! // The holder is told when it may have lost the lock (suspension, expiry, deletion).
//! assert_eq!(guard.current_status(), LockStatus::Held);
//! guard.release().await?;
//! session.close().await;
//! # Ok(()) }
//! ```
//!
//! # Recipes
//!
//! | recipe | Curator's name | what it admits |
//! |---|---|---|
//! | [`InterProcessMutex`] | `InterProcessMutex` | one holder; reentrant through [`LockGuard::reenter`] |
//! | [`InterProcessSemaphoreMutex`] | `InterProcessSemaphoreMutex` | one holder, not reentrant |
//! | [`InterProcessReadWriteLock`] | `InterProcessReadWriteLock` | many readers or one writer (1) |
//! | [`InterProcessSemaphore`] | `InterProcessSemaphoreV2` | up to N leases, weighted, FIFO |
//! | [`InterProcessMultiLock`] | `InterProcessMultiLock` | all of several [`Lock`]s, or none |
//! | [`LeaderLatch`] | `LeaderLatch` | the first in line leads |
//! | [`LeaderSelector`] | `LeaderSelector` | runs your task while you lead |
//! | [`request_revocation`] | `Revoker` | asks a holder to let go |
//!
//! (1) Writer-preferring, and a writer may downgrade to a reader.
//!
//! The exclusive locks share the [`Lock`] trait (Curator's `InterProcessLock`), with
//! [`LockExt::with_lock`]. Node names follow Curator's, so these recipes share paths with
//! Curator's (and, with [`NodeFormat::Kazoo`], with kazoo's).
//!
//! # The safety model
//!
//! A ZooKeeper lock is only as good as its holder's knowledge that it still holds it. Every
//! hold has a status ([`LockGuard::status`], [`LockGuard::lost`]): it is `Suspended` while the
//! connection is down and `Lost` once the session expired or the node was deleted. The server
//! can expire a session, and grant the lock to someone else, one negotiated timeout after the
//! last request it received from us: [`LockGuard::safe_until`] is that instant, and anything
//! that must not overlap the next holder must stop before it. A process can still be paused
//! past it (a GC pause, a frozen VM); only the resource can refuse a stale holder, which is
//! what the fencing token ([`LockGuard::fencing_token`], the node's `czxid`) is for. A
//! [`Session`] outlives expiry: holds taken in an expired session stay lost, while waiters and
//! elections queue again on the new session by themselves. See [`ConnectionState`] for the
//! states and their Curator equivalents.
//!
//! # More
//!
//! The README covers the quick start, a short tour and the headline figures; the
//! repository's `docs/` pages cover the rest: `sessions.md` (what every recipe does in each
//! connection state), `recipes.md`, `safety.md` (the safety model and safety under faults),
//! `interop.md` (beside Curator and kazoo), `zklock.md` (the command-line tool), `security.md`
//! (ACLs, TLS), `metrics.md`, `performance.md` (the benchmarks) and `testing.md`. Metrics go
//! through the [`metrics`](https://docs.rs/metrics) facade (names and labels: see
//! `docs/metrics.md`); tracing spans carry the path, node, fencing token and session generation.
//!
//! The raw `zookeeper_client` crate is re-exported for the one escape hatch,
//! [`Session::client`], and for the types it shares with the recipes (ACLs, create options):
//! its types follow that crate's versions, not ours.
//!
//! # Feature flags
//!
//! `tls`, `sasl-digest-md5` and `sasl-gssapi`, all off by default (on docs.rs, the list below
//! is generated from the comments of `Cargo.toml`'s `[features]`).
#![cfg_attr(feature = "document-features", doc = document_features::document_features!())]
// docs.rs marks the items of an optional feature ("Available on crate feature tls only").
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod format;
mod guard;
mod hold;
mod identity;
pub mod inspect;
mod leader;
mod lock_core;
mod markers;
mod metrics;
mod naming;
mod options;
mod participants;
mod path;
mod queue;
mod recipes;
mod revocation;
mod session;
mod status;
mod util;

// Not part of the API: hooks for the fuzz targets and parser property tests (see the module).
#[doc(hidden)]
pub mod __fuzz;

pub use error::{is_connection_loss, ClientError, ConnectFailure, Error, PathError, Probe, Result};
pub use format::NodeFormat;
pub use guard::{FencedWriter, LockGuard};
pub use identity::default_participant_id;
pub use leader::{
    LatchOptions, LeaderInfo, LeaderLatch, LeaderObserver, LeaderSelector, Leadership, LeadershipContext,
    SelectorOptions, TermEnded, TermOutcome, TermResult,
};
pub use naming::Party;
pub use options::LockOptions;
pub use participants::Participant;
pub use path::LockPath;
pub use queue::{GiveUpReason, QueueEvent, QueueStats};
pub use recipes::{
    InterProcessMultiLock, InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphore,
    InterProcessSemaphoreMutex, Lock, LockExt, ReadLock, WriteLock,
};
pub use revocation::request_revocation;
pub use session::ConnectOptions;
#[cfg(any(feature = "sasl-digest-md5", feature = "sasl-gssapi"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "sasl-digest-md5", feature = "sasl-gssapi"))))]
pub use session::SaslConfig;
pub use session::ServerFeatures;
pub use session::Session;
#[cfg(feature = "tls")]
pub use session::TlsConfig;
pub use status::{ConnectionState, LockStatus, LossPolicy, SessionStatus};
pub use zookeeper_client;

/// The README's examples, compiled as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The examples of `docs/sessions.md`, compiled as doctests.
#[doc = include_str!("../docs/sessions.md")]
#[cfg(doctest)]
pub struct DocsSessionsDoctests;

/// The examples of `docs/recipes.md`, compiled as doctests.
#[doc = include_str!("../docs/recipes.md")]
#[cfg(doctest)]
pub struct DocsRecipesDoctests;

/// The examples of `docs/security.md`, compiled as doctests.
#[doc = include_str!("../docs/security.md")]
#[cfg(doctest)]
pub struct DocsSecurityDoctests;
