//! [`ClusterConfig`]: what a test cluster runs, and [`TlsMode`].

use std::time::Duration;

pub use super::sasl::SaslMode;
use crate::ZkVersion;

#[cfg(doc)]
use crate::{certs::TlsFiles, HarnessError, ZkCluster};

/// Settings for a test cluster. [`ClusterConfig::default`] is tuned for fast tests.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// Number of servers: 1 runs standalone, more form an ensemble.
    pub nodes: usize,
    /// ZooKeeper's `tickTime`. Session timeouts are bounded to `[2, 20]` ticks by default
    /// servers; we widen the upper bound (see [`ClusterConfig::max_session_timeout`]).
    pub tick_time: Duration,
    /// `forceSync`: `false` skips fsync per transaction, for speed where durability is not
    /// under test.
    pub force_sync: bool,
    /// `maxClientCnxns` per client IP; 0 means unlimited (many sessions from loopback).
    pub max_client_cnxns: u32,
    /// The largest session timeout a client may negotiate.
    pub max_session_timeout: Duration,
    /// The JVM's maximum heap (`-Xmx`), in MiB: 256 by default, enough for every test but one
    /// that has the server answer thousands of large listings on one connection at once (the
    /// answers wait in the server's memory until the client reads them). Local backend only.
    pub heap_mb: u32,
    /// How long to wait for every node to answer `srvr` with a `Mode:` line.
    pub ready_timeout: Duration,
    /// Extra `key=value` lines for `zoo.cfg`.
    pub extra: Vec<(String, String)>,
    /// Java system properties for each server (`-Dkey=value`), for the settings ZooKeeper reads
    /// only from system properties, not from `zoo.cfg` (an unknown `zoo.cfg` key becomes
    /// `zookeeper.<key>`). For example the container reaper's
    /// `znode.container.checkIntervalMs` and `znode.container.maxPerMinute`. Local backend only;
    /// the Docker backend ignores them, as it ignores [`ClusterConfig::extra`].
    pub jvm_properties: Vec<(String, String)>,
    /// A TLS secure client port beside the plaintext one (local backend only).
    pub tls: TlsMode,
    /// SASL authentication (DIGEST-MD5 or Kerberos), required of every client (local backend
    /// only).
    pub sasl: SaslMode,
    /// Route the traffic between servers through fault proxies, so that
    /// [`ZkCluster::partition`] can cut one server off from the others. Off by default: every
    /// message between servers then crosses a proxy, which adds latency. Local backend only: the
    /// Docker backend returns [`HarnessError::Unsupported`] when asked for it; a standalone
    /// server has no peers, so the setting does nothing there.
    pub partitionable: bool,
    /// Load a shim into every server that delays its `fsync`/`fdatasync` on demand
    /// ([`ZkCluster::stall_disk`]); compiled with `cc` at start. Local backend only.
    pub disk_stall: bool,
    /// Give each server a transaction-log directory (`dataLogDir`) on a tmpfs of this many MiB
    /// of its own, so that [`ZkCluster::fill_log_disk`] can fill it. Mounting needs
    /// `CAP_SYS_ADMIN` (root). Local backend only.
    pub log_disk_mb: Option<u32>,
    /// Pin every server process to these CPUs (indices as `taskset -c` takes them, each below
    /// 1024): `sched_setaffinity` in the child between fork and exec, so every thread the JVM
    /// starts inherits the set, on the first start and on every restart. `None` (the default)
    /// leaves the servers wherever the scheduler puts them. For benchmarks that keep the
    /// servers off the clients' cores (`zk-bench --pin`). An empty set, or CPUs this machine
    /// does not have, fail the start. Local backend only: the Docker backend returns
    /// [`HarnessError::Unsupported`] when asked for it.
    pub cpus: Option<Vec<usize>>,
    /// Dynamic reconfiguration (`reconfigEnabled=true`, with `skipACL=yes` so that any client
    /// may send `reconfig`; each `server.N` line carries its client address): for
    /// [`ZkCluster::add_member`] and `Client::update_ensemble`. Ensembles only.
    pub reconfig: bool,
    /// The ZooKeeper release every server runs (unless [`ClusterConfig::node_versions`] says
    /// otherwise). The default is [`ZkVersion::from_env`]: `ZK_VERSION`, else
    /// [`ZkVersion::DEFAULT`] (3.9.3); an unparsable `ZK_VERSION` fails [`ZkCluster::start`] with
    /// [`HarnessError::BadVersion`]. A version not unpacked here fails it with
    /// [`HarnessError::MissingVersion`] (run `scripts/ensure-zookeeper-versions`); one that
    /// reports another version in `srvr`, with [`HarnessError::WrongVersion`]. Local backend: the
    /// Docker backend runs its image's version.
    pub version: ZkVersion,
    /// Per-node versions for a mixed ensemble: node `i` runs `node_versions[i]`, nodes past the
    /// end run [`ClusterConfig::version`]. Empty by default. [`ZkCluster::restart_as`] changes
    /// one node's version later (a rolling upgrade).
    pub node_versions: Vec<ZkVersion>,
}

/// Whether servers open a TLS `secureClientPort`, and whether it asks clients for certificates.
///
/// With TLS on, every server also keeps its plaintext `clientPort` (the harness asks `srvr`
/// there); [`ZkCluster::secure_connect_string`] gives the TLS ports and
/// [`ZkCluster::tls_files`] the throwaway CA and client identities (see [`TlsFiles`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TlsMode {
    /// No secure port.
    #[default]
    Off,
    /// TLS with a server certificate; clients need no certificate (`ssl.clientAuth=none`).
    ServerAuth,
    /// Mutual TLS: clients must show a certificate from the cluster's CA
    /// (`ssl.clientAuth=need`). ZooKeeper's `x509` auth provider then names each client by its
    /// certificate's subject, for ACLs such as `x509:CN=zk-recipes-client,O=zk-testcluster`.
    Mutual,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            nodes: 1,
            tick_time: Duration::from_millis(200),
            force_sync: false,
            max_client_cnxns: 0,
            max_session_timeout: Duration::from_secs(60),
            heap_mb: 256,
            ready_timeout: Duration::from_secs(45),
            extra: Vec::new(),
            jvm_properties: Vec::new(),
            tls: TlsMode::Off,
            sasl: SaslMode::Off,
            partitionable: false,
            disk_stall: false,
            log_disk_mb: None,
            cpus: None,
            reconfig: false,
            version: ZkVersion::from_env().unwrap_or(ZkVersion::DEFAULT),
            node_versions: Vec::new(),
        }
    }
}

impl ClusterConfig {
    /// Sets [`ClusterConfig::partitionable`].
    #[must_use]
    pub fn partitionable(mut self, on: bool) -> Self {
        self.partitionable = on;
        self
    }

    /// Sets [`ClusterConfig::heap_mb`].
    #[must_use]
    pub fn heap_mb(mut self, mb: u32) -> Self {
        self.heap_mb = mb;
        self
    }

    /// Sets [`ClusterConfig::version`].
    #[must_use]
    pub fn version(mut self, version: ZkVersion) -> Self {
        self.version = version;
        self
    }
}
