//! Fencing at the user's own resources: a holder's writes to PostgreSQL and Redis that the
//! resource refuses once a newer holder of the same lock has shown its fencing token.
//!
//! Include it with `#[path = "../fencing/mod.rs"] mod fencing;` (from `examples/X/main.rs`) or
//! `#[path = "../examples/fencing/mod.rs"] mod fencing;` (from `tests/X.rs`). The patterns, why
//! they are shaped this way and the tests behind each claim: `docs/fencing.md`.
//!
//! The discipline every pattern relies on:
//! * one fence per lock path: tokens of different lock paths are never compared;
//! * the holder registers its token ([`postgres::register`], [`redis::register`]) BEFORE it
//!   reads, so that a stale holder's late write cannot land between a newer holder's read and
//!   its write;
//! * each write checks the fence in the same statement (PostgreSQL) or script (Redis) that
//!   writes; a token below the fence is refused with [`FenceError::Stale`], an equal one passes,
//!   a higher one raises the fence.
//!
//! The token is [`zk_recipes::LockGuard::fencing_token_i64`]: the lock node's `czxid`, a
//! positive signed 64-bit ZooKeeper transaction id, so it fits a `bigint` column unchanged.
#![allow(dead_code)]

pub mod postgres;
pub mod redis;

use std::time::Duration;

/// How long `connect` waits for a resource before it gives up with [`FenceError::Connect`].
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A write the resource refused: a newer holder of the same lock path registered a higher token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleToken {
    /// `"postgres"` or `"redis"`.
    pub resource: &'static str,
    /// The lock path whose fence refused the write.
    pub lock_path: String,
    /// The token the write carried.
    pub token: i64,
    /// The highest token registered for the lock path, as read right after the refusal.
    pub highest: i64,
}

impl std::fmt::Display for StaleToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} refused a write for lock {}: token {} is older than the fence's {}",
            self.resource, self.lock_path, self.token, self.highest
        )
    }
}

impl std::error::Error for StaleToken {}

/// What a fenced call can fail with.
#[derive(Debug)]
pub enum FenceError {
    /// The fence refused the token (nothing was written).
    Stale(StaleToken),
    /// An error from PostgreSQL (the outcome of a write is then unknown).
    Postgres(tokio_postgres::Error),
    /// An error from Redis (the outcome of a write is then unknown).
    Redis(::redis::RedisError),
    /// `connect` could not reach the resource (or could not read its address).
    Connect {
        /// `"postgres"` or `"redis"`.
        resource: &'static str,
        /// Where it was looked for (`host:port`, several joined by `,`).
        addr: String,
        /// What went wrong.
        reason: String,
    },
}

impl FenceError {
    /// Whether the resource refused the token ([`FenceError::Stale`]).
    pub fn is_stale(&self) -> bool {
        matches!(self, FenceError::Stale(_))
    }

    /// The refusal, if this is one.
    pub fn stale(&self) -> Option<&StaleToken> {
        match self {
            FenceError::Stale(s) => Some(s),
            _ => None,
        }
    }
}

impl std::fmt::Display for FenceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FenceError::Stale(s) => write!(f, "stale fencing token: {s}"),
            FenceError::Postgres(e) => {
                write!(f, "postgres: {e}")?;
                if let Some(db) = e.as_db_error() {
                    write!(f, " ({})", db.message())?;
                }
                Ok(())
            }
            FenceError::Redis(e) => write!(f, "redis: {e}"),
            FenceError::Connect { resource, addr, reason } => write!(f, "{resource} at {addr}: {reason}"),
        }
    }
}

impl std::error::Error for FenceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FenceError::Stale(s) => Some(s),
            FenceError::Postgres(e) => Some(e),
            FenceError::Redis(e) => Some(e),
            FenceError::Connect { .. } => None,
        }
    }
}

impl From<tokio_postgres::Error> for FenceError {
    fn from(e: tokio_postgres::Error) -> Self {
        FenceError::Postgres(e)
    }
}

impl From<::redis::RedisError> for FenceError {
    fn from(e: ::redis::RedisError) -> Self {
        FenceError::Redis(e)
    }
}

/// How a fenced decrement of a stock came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StockOutcome {
    /// One item was taken; `left` remain.
    Sold {
        /// What is left after this sale.
        left: i64,
    },
    /// Nothing left: the stock was not touched (it never goes below 0).
    SoldOut,
}
