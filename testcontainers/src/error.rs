//! The harness's error type.

use std::path::PathBuf;

/// What can go wrong while starting or controlling a test cluster.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// No backend can run ZooKeeper on this machine. The message says what to install.
    #[error("no ZooKeeper backend available: {0}")]
    NoBackend(String),

    /// `ZK_TEST_BACKEND` holds a value other than `auto`, `local` or `docker`.
    #[error("ZK_TEST_BACKEND={0:?} is not one of auto, local, docker")]
    BadBackend(String),

    /// A server process exited, or never answered `srvr`, during start-up.
    #[error(
        "ZooKeeper node {node} did not become ready within {waited_ms} ms (log: {log}); log \
         tail:\n{log_tail}"
    )]
    NotReady {
        /// Index of the node.
        node: usize,
        /// How long we waited.
        waited_ms: u128,
        /// The server's log file (gone once the cluster is dropped: hence the tail).
        log: PathBuf,
        /// The last lines of that log, read when the wait gave up.
        log_tail: String,
    },

    /// A ZooKeeper version string (`ZK_VERSION`, [`crate::ZkVersion`]'s `parse`) that is not
    /// three dot-separated numbers such as `3.9.3`.
    #[error("{0:?} is not a ZooKeeper version such as 3.9.3")]
    BadVersion(String),

    /// The ZooKeeper version asked for is not unpacked on this machine.
    #[error(
        "ZooKeeper {version} is not at hand (looked in {looked}): run \
         `scripts/ensure-zookeeper-versions {version}`, or point ZOOKEEPER_HOME at an install of it \
         and set ZK_VERSION={version}"
    )]
    MissingVersion {
        /// The version asked for.
        version: crate::ZkVersion,
        /// Where the harness looked for its jars.
        looked: String,
    },

    /// A server reported (`srvr`) another version than the one it was started as.
    #[error(
        "ZooKeeper node {node} was asked to run {asked} but reports {}",
        got.map_or("no version".to_string(), |v| v.to_string())
    )]
    WrongVersion {
        /// Index of the node.
        node: usize,
        /// The version asked for.
        asked: crate::ZkVersion,
        /// The version its `srvr` reports, if any.
        got: Option<crate::ZkVersion>,
    },

    /// A node index out of range.
    #[error("node {0} does not exist in this cluster")]
    NoSuchNode(usize),

    /// The operation is not offered by this backend.
    #[error("{0} is not supported by the {1} backend")]
    Unsupported(&'static str, &'static str),

    /// [`crate::ZkCluster::partition`] on a cluster started without
    /// [`crate::ClusterConfig::partitionable`], or a standalone one.
    #[error("the cluster was not started partitionable (ClusterConfig::partitionable)")]
    NotPartitionable,

    /// No node answered `srvr` with `Mode: leader` or `Mode: standalone`.
    #[error("no node reports itself as leader")]
    NoLeader,

    /// A resource server (PostgreSQL, Redis) is not installed here. The message says what to
    /// install (`scripts/ensure-resources`).
    #[error("{resource} is not installed: {hint}")]
    NotInstalled {
        /// `"PostgreSQL"` or `"Redis"`.
        resource: &'static str,
        /// What was looked for and what to install.
        hint: String,
    },

    /// A resource server's set-up step (such as `initdb`) failed.
    #[error("{resource}: {step} failed: {output}")]
    ResourceSetup {
        /// `"PostgreSQL"` or `"Redis"`.
        resource: &'static str,
        /// The step, e.g. the command line.
        step: String,
        /// What the step printed (its tail).
        output: String,
    },

    /// A resource server exited, or did not accept connections, during start-up.
    #[error("{resource} at {addr} did not become ready within {waited_ms} ms; log tail:\n{log_tail}")]
    ResourceNotReady {
        /// `"PostgreSQL"` or `"Redis"`.
        resource: &'static str,
        /// The address it was told to listen on.
        addr: std::net::SocketAddr,
        /// How long we waited.
        waited_ms: u128,
        /// The last lines of the server's log.
        log_tail: String,
    },

    /// An I/O error from the operating system.
    #[error("{context}: {source}")]
    Io {
        /// What the harness was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl HarnessError {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> HarnessError {
        let context = context.into();
        move |source| HarnessError::Io { context, source }
    }
}
