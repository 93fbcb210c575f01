//! `zk-testcluster`: real ZooKeeper servers for tests, examples and benchmarks.
//!
//! * [`ZkCluster::standalone`] and [`ZkCluster::ensemble`] start servers on free loopback ports,
//!   each with its own temporary data directory, and return once every server answers `srvr`
//!   with a `Mode:` line.
//! * Per-node control: [`ZkCluster::stop`], [`ZkCluster::kill`], [`ZkCluster::restart`],
//!   [`ZkCluster::freeze`], [`ZkCluster::thaw`], [`ZkCluster::leader`], [`ZkCluster::mntr`].
//! * [`FaultProxy`]: cut, reset, blackhole and latency between one client and the cluster.
//! * Partitions between servers ([`ClusterConfig::partitionable`]): [`ZkCluster::partition`]
//!   cuts one server off from the others, [`ZkCluster::heal_partition`] ends it.
//! * TLS ([`ClusterConfig::tls`]): a `secureClientPort` per server with a throwaway CA, server
//!   and client certificates made by `openssl` ([`TlsFiles`]); one-way or mutual.
//! * Teardown kills every server by PID, also while a test panics; see [`ZkCluster`].
//! * The user's own resources, for fencing tests: [`PostgresServer`] (a throwaway PostgreSQL
//!   cluster made by `initdb`, trust auth, user `postgres`; run as the `postgres` user when we are
//!   root) and [`RedisServer`] (`redis-server` without persistence), each on a free loopback port
//!   in its own temporary directory, ready once it accepts connections (PostgreSQL) or answers
//!   `PING` (Redis), and stopped by PID on `stop()` or drop, also while a test panics. Debian's
//!   `postgresql` and `redis-server` packages (`scripts/ensure-resources` installs them);
//!   `PG_BIN` and `REDIS_SERVER` point elsewhere.
//!
//! Backends: the local one (default) runs Debian's `zookeeper` package or `$ZOOKEEPER_HOME` as
//! `java` processes. `ZK_TEST_BACKEND=auto|local|docker` picks one; the Docker backend sits
//! behind the `docker` cargo feature.

mod certs;
mod cluster;
mod docker;
mod error;
mod fourlw;
mod local;
mod ports;
mod postgres;
mod proxy;
mod redis;
mod resource;
mod spawner;

pub use certs::{TlsFiles, CLIENT_SUBJECT, OTHER_CLIENT_SUBJECT};
pub use cluster::{ClusterConfig, Mntr, TlsMode, ZkCluster};
pub use error::HarnessError;
pub use fourlw::Mode;
pub use postgres::{PostgresConfig, PostgresServer};
pub use proxy::FaultProxy;
pub use redis::{RedisConfig, RedisServer};

/// The connect string tests should use: `ZK_CONNECT` when set (an external server), else `None`.
pub fn external_connect_string() -> Option<String> {
    std::env::var("ZK_CONNECT").ok().filter(|s| !s.trim().is_empty())
}
