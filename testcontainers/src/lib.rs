//! `zk-testcluster`: real ZooKeeper servers for tests, examples and benchmarks.
//!
//! * [`ZkCluster::standalone`] and [`ZkCluster::ensemble`] start servers on free loopback ports,
//!   each with its own temporary data directory, and return once every server answers `srvr`
//!   with a `Mode:` line.
//! * Per-node control: [`ZkCluster::stop`], [`ZkCluster::kill`], [`ZkCluster::restart`],
//!   [`ZkCluster::freeze`], [`ZkCluster::thaw`], [`ZkCluster::leader`], [`ZkCluster::mntr`].
//! * [`FaultProxy`]: cut, reset, blackhole and latency between one client and the cluster;
//!   one-way faults ([`FaultProxy::hold_requests`], [`FaultProxy::hold_replies`]) and a path
//!   pinned to one server ([`FaultProxy::pin_to`]).
//! * Partitions between servers ([`ClusterConfig::partitionable`]): [`ZkCluster::partition`]
//!   cuts one server off from the others, [`ZkCluster::partition_one_way`] holds one direction
//!   between two servers, [`ZkCluster::heal_partition`] ends them; [`ZkCluster::delay_link`]
//!   slows one direction (a lagging follower).
//! * Disk faults: [`ClusterConfig::disk_stall`] loads an `LD_PRELOAD` shim (compiled with `cc`)
//!   into every server, so that [`ZkCluster::stall_disk`] delays one server's `fsync`s;
//!   [`ClusterConfig::log_disk_mb`] puts each server's transaction log on a tmpfs of its own
//!   (needs `CAP_SYS_ADMIN`), which [`ZkCluster::fill_log_disk`] fills.
//! * TLS ([`ClusterConfig::tls`]): a `secureClientPort` per server with a throwaway CA, server
//!   and client certificates made by `openssl` ([`TlsFiles`]); one-way or mutual.
//! * Faked clocks ([`FakeClock`], Debian's libfaketime): [`ZkCluster::restart_with_env`] runs one
//!   server with its clock fast or slow; the same environment fakes any child process's clock.
//! * CPU pinning ([`ClusterConfig::cpus`]): every server process, each of its threads, on the
//!   CPUs asked for (benchmarks keep the servers off the clients' cores).
//! * SASL ([`ClusterConfig::sasl`], [`SaslMode`]): servers with a JAAS `Server` section for
//!   DIGEST-MD5 users or a Kerberos service principal, refusing clients that do not
//!   authenticate; [`Kdc`] is a throwaway MIT Kerberos realm and KDC (Debian's `krb5-kdc`,
//!   `scripts/ensure-kerberos` installs it) whose principals and keytabs the harness makes.
//! * Teardown kills every server by PID, also while a test panics; see [`ZkCluster`].
//! * The user's own resources, for fencing tests: [`PostgresServer`] (a throwaway PostgreSQL
//!   cluster made by `initdb`, trust auth, user `postgres`; run as the `postgres` user when we are
//!   root) and [`RedisServer`] (`redis-server` without persistence), each on a free loopback port
//!   in its own temporary directory, ready once it accepts connections (PostgreSQL) or answers
//!   `PING` (Redis), and stopped by PID on `stop()` or drop, also while a test panics. Debian's
//!   `postgresql` and `redis-server` packages (`scripts/ensure-resources` installs them);
//!   `PG_BIN` and `REDIS_SERVER` point elsewhere.
//!
//! * Server versions ([`ZkVersion`], [`ClusterConfig::version`], `ZK_VERSION`): 3.9.3 by default,
//!   3.8.0, 3.6.3, 3.9.6 (whatever `scripts/ensure-zookeeper-versions` unpacked), one per node for
//!   mixed ensembles ([`ClusterConfig::node_versions`]) and rolling upgrades
//!   ([`ZkCluster::restart_as`]); each server's `srvr` version is checked after it starts.
//!
//! Backends: the local one (default) runs the version's jars (Debian 12's `zookeeper` package for
//! 3.8.0) or `$ZOOKEEPER_HOME` as `java` processes. `ZK_TEST_BACKEND=auto|local|docker` picks
//! one; the Docker backend sits behind the `docker` cargo feature.

mod certs;
mod cluster;
mod docker;
mod error;
mod faketime;
mod fourlw;
mod kdc;
mod local;
mod ports;
mod postgres;
mod proxy;
mod redis;
mod resource;
mod spawner;
mod version;

pub use certs::{TlsFiles, CLIENT_SUBJECT, OTHER_CLIENT_SUBJECT};
pub use cluster::{ClusterConfig, Mntr, SaslMode, TlsMode, ZkCluster};
pub use error::HarnessError;
pub use faketime::FakeClock;
pub use fourlw::{four_letter_at, Mode};
pub use kdc::{Kdc, KdcConfig, REALM as KERBEROS_REALM};
pub use postgres::{PostgresConfig, PostgresServer};
pub use proxy::FaultProxy;
pub use redis::{RedisConfig, RedisServer};
pub use version::ZkVersion;

/// The connect string tests should use: `ZK_CONNECT` when set (an external server), else `None`.
pub fn external_connect_string() -> Option<String> {
    std::env::var("ZK_CONNECT").ok().filter(|s| !s.trim().is_empty())
}
