//! [`ZkCluster`]: a standalone server or an ensemble on free loopback ports.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use crate::certs::TlsFiles;
use crate::fourlw::{self, Mode};
use crate::local::{self, LocalInstall};
use crate::ports::free_ports;
use crate::{FaultProxy, HarnessError, ZkVersion};

mod config;
mod faults;
mod grey;
mod links;
mod members;
mod mntr;
mod sasl;
mod versions;
mod zoo_cfg;

pub use config::{ClusterConfig, SaslMode, TlsMode};
use links::{links, Link};
pub use mntr::Mntr;

/// How many times a start is retried with fresh ports when a server fails to come up (another
/// process may take a port between our probe and the server's bind).
const START_ATTEMPTS: usize = 3;

struct Node {
    /// The loopback address the client ports bind (127.0.0.1 unless moved: see
    /// [`ZkCluster::move_client_address`]).
    host: Ipv4Addr,
    /// Whether the node is in the ensemble's configuration: written in the `server.N` lines of
    /// the configs the harness writes (see [`ZkCluster::add_member`]).
    member: bool,
    client_port: u16,
    secure_port: Option<u16>,
    quorum_port: u16,
    election_port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// Extra environment for this node's next starts (see [`ZkCluster::restart_with_env`]).
    env: Vec<(String, String)>,
    /// The version this node runs ([`ClusterConfig::node_versions`], [`ZkCluster::restart_as`]).
    version: ZkVersion,
    /// Its jars (`None` on the Docker backend).
    install: Option<LocalInstall>,
}

impl Node {
    fn cfg_path(&self) -> PathBuf {
        self.dir.join("zoo.cfg")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("zookeeper.log")
    }

    fn client_addr(&self) -> SocketAddr {
        (self.host, self.client_port).into()
    }

    fn secure_addr(&self) -> Option<SocketAddr> {
        self.secure_port.map(|port| (self.host, port).into())
    }
}

/// A running ZooKeeper standalone server or ensemble, torn down on drop.
///
/// Every server is a child process launched by this harness; dropping the cluster (also while a
/// test panics) SIGKILLs each one by PID and removes its temporary directory. Set
/// `ZK_TEST_KEEP_LOGS=1` to keep the directory (with each node's `zookeeper.log`) when the
/// dropping thread is panicking, or `ZK_TEST_KEEP_LOGS=always` to keep it in every case.
pub struct ZkCluster {
    config: ClusterConfig,
    dir: Option<tempfile::TempDir>,
    nodes: Vec<Node>,
    tls: Option<TlsFiles>,
    /// One proxy per ordered pair of servers, for a [`ClusterConfig::partitionable`] ensemble.
    links: Vec<Link>,
    /// The disk-stall shim and the log disks (see the `grey` module).
    grey: grey::Grey,
    /// Keep the directory (the servers' logs) on drop whatever `ZK_TEST_KEEP_LOGS` says
    /// ([`ZkCluster::keep_logs`]).
    keep_logs: bool,
    #[cfg(feature = "docker")]
    docker: Option<crate::docker::DockerNode>,
}

impl std::fmt::Debug for ZkCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkCluster")
            .field("connect", &self.connect_string())
            .field("pids", &self.nodes.iter().map(|n| n.child.as_ref().map(|c| c.id())).collect::<Vec<_>>())
            .finish()
    }
}

/// Which backend `ZK_TEST_BACKEND` asks for.
fn backend_choice() -> Result<&'static str, HarnessError> {
    match std::env::var("ZK_TEST_BACKEND").as_deref() {
        Err(_) | Ok("") | Ok("auto") => Ok("auto"),
        Ok("local") => Ok("local"),
        Ok("docker") => Ok("docker"),
        Ok(other) => Err(HarnessError::BadBackend(other.to_string())),
    }
}

impl ZkCluster {
    /// Starts one standalone server with [`ClusterConfig::default`].
    ///
    /// # Errors
    /// [`HarnessError::NoBackend`] (with what to install) when no ZooKeeper can run here;
    /// [`HarnessError::NotReady`] when the server does not come up.
    pub async fn standalone() -> Result<ZkCluster, HarnessError> {
        Self::start(ClusterConfig::default()).await
    }

    /// Starts an ensemble of `n` servers and returns once every one answers `srvr` with a
    /// `Mode:` line, that is, once the quorum has formed.
    ///
    /// # Errors
    /// As [`ZkCluster::standalone`].
    pub async fn ensemble(n: usize) -> Result<ZkCluster, HarnessError> {
        Self::start(ClusterConfig { nodes: n, ..ClusterConfig::default() }).await
    }

    /// Starts a cluster with explicit settings.
    ///
    /// # Errors
    /// As [`ZkCluster::standalone`]; also [`HarnessError::Unsupported`] for a backend that
    /// cannot run the requested shape.
    pub async fn start(config: ClusterConfig) -> Result<ZkCluster, HarnessError> {
        let choice = backend_choice()?;
        // A bad ZK_VERSION fails every start, also one whose config names its version itself.
        ZkVersion::from_env()?;
        let installs = match (choice, versions::installs(&config)) {
            ("docker", _) | ("auto", Err(HarnessError::NoBackend(_))) => {
                return Self::start_docker(config).await
            }
            (_, found) => found?,
        };
        let mut last_err = None;
        for attempt in 1..=START_ATTEMPTS {
            let mut cluster = ZkCluster::prepare(config.clone(), &installs)?;
            match cluster.launch_all().await {
                Ok(()) => return Ok(cluster),
                Err(e) => {
                    tracing::warn!(attempt, error = %e, "ZooKeeper start failed; retrying with fresh ports");
                    last_err = Some(e);
                }
            }
        }
        Err(last_err.unwrap_or(HarnessError::NoLeader))
    }

    #[cfg(not(feature = "docker"))]
    async fn start_docker(_config: ClusterConfig) -> Result<ZkCluster, HarnessError> {
        Err(crate::docker::unavailable())
    }

    #[cfg(feature = "docker")]
    async fn start_docker(config: ClusterConfig) -> Result<ZkCluster, HarnessError> {
        if config.tls != TlsMode::Off {
            return Err(HarnessError::Unsupported("TLS", "docker"));
        }
        if config.sasl != SaslMode::Off {
            return Err(HarnessError::Unsupported("SASL", "docker"));
        }
        if config.partitionable && config.nodes > 1 {
            return Err(HarnessError::Unsupported("partitionable", "docker"));
        }
        if config.disk_stall || config.log_disk_mb.is_some() {
            return Err(HarnessError::Unsupported("disk_stall and log_disk_mb", "docker"));
        }
        if config.cpus.is_some() {
            return Err(HarnessError::Unsupported("cpus", "docker"));
        }
        let node = crate::docker::start(&config).await?;
        let dir = tempfile::Builder::new()
            .prefix("zk-testcluster-")
            .tempdir()
            .map_err(HarnessError::io("creating the cluster's temporary directory"))?;
        let nodes = vec![Node {
            host: Ipv4Addr::LOCALHOST,
            member: true,
            client_port: node.port,
            secure_port: None,
            quorum_port: 0,
            election_port: 0,
            dir: dir.path().join("node1"),
            child: None,
            env: Vec::new(),
            version: config.version,
            install: None,
        }];
        let mut cluster = ZkCluster {
            config,
            dir: Some(dir),
            nodes,
            tls: None,
            links: Vec::new(),
            grey: grey::Grey::default(),
            keep_logs: false,
            docker: Some(node),
        };
        cluster.wait_ready(0).await?;
        Ok(cluster)
    }

    fn prepare(
        mut config: ClusterConfig,
        installs: &[(ZkVersion, LocalInstall)],
    ) -> Result<ZkCluster, HarnessError> {
        let n = config.nodes.max(1);
        let dir = tempfile::Builder::new()
            .prefix("zk-testcluster-")
            .tempdir()
            .map_err(HarnessError::io("creating the cluster's temporary directory"))?;
        let (cfg, properties) = sasl::settings(&config.sasl, dir.path())?;
        config.extra.splice(0..0, cfg);
        config.jvm_properties.extend(properties);
        let per_node = if config.tls == TlsMode::Off { 3 } else { 4 };
        let ports = free_ports(per_node * n)?;
        let nodes = (0..n)
            .map(|i| Node {
                host: Ipv4Addr::LOCALHOST,
                member: true,
                client_port: ports[per_node * i],
                quorum_port: ports[per_node * i + 1],
                election_port: ports[per_node * i + 2],
                secure_port: (per_node == 4).then(|| ports[per_node * i + 3]),
                dir: dir.path().join(format!("node{}", i + 1)),
                child: None,
                env: Vec::new(),
                version: installs[i].0,
                install: Some(installs[i].1.clone()),
            })
            .collect::<Vec<_>>();
        let tls = match config.tls {
            TlsMode::Off => None,
            TlsMode::ServerAuth | TlsMode::Mutual => Some(TlsFiles::generate(&dir.path().join("tls"))?),
        };
        let links = if config.partitionable && n > 1 { links(&nodes)? } else { Vec::new() };
        let grey = grey::Grey::prepare(&config, &nodes, dir.path())?;
        let cluster = ZkCluster {
            config,
            dir: Some(dir),
            nodes,
            tls,
            links,
            keep_logs: false,
            grey,
            #[cfg(feature = "docker")]
            docker: None,
        };
        for (i, node) in cluster.nodes.iter().enumerate() {
            let data = node.dir.join("data");
            std::fs::create_dir_all(&data)
                .map_err(HarnessError::io(format!("creating {}", data.display())))?;
            std::fs::write(data.join("myid"), format!("{}\n", i + 1))
                .map_err(HarnessError::io("writing myid"))?;
            std::fs::write(node.cfg_path(), cluster.zoo_cfg(i))
                .map_err(HarnessError::io("writing zoo.cfg"))?;
        }
        Ok(cluster)
    }

    async fn launch_all(&mut self) -> Result<(), HarnessError> {
        for i in 0..self.nodes.len() {
            self.spawn(i)?;
        }
        for i in 0..self.nodes.len() {
            self.wait_ready(i).await?;
        }
        for i in 0..self.nodes.len() {
            self.check_version(i).await?;
        }
        Ok(())
    }

    fn spawn(&mut self, i: usize) -> Result<(), HarnessError> {
        let node = &self.nodes[i];
        let install = node.install.as_ref().ok_or(HarnessError::Unsupported("restart", "docker"))?;
        let child = install.spawn(
            &node.cfg_path(),
            &node.log_path(),
            self.config.heap_mb,
            &self.config.jvm_properties,
            &self.grey.env(node),
            self.config.cpus.as_deref(),
        )?;
        tracing::debug!(node = i, pid = child.id(), port = node.client_port, "started ZooKeeper");
        self.nodes[i].child = Some(child);
        Ok(())
    }

    async fn wait_ready(&mut self, i: usize) -> Result<(), HarnessError> {
        let started = Instant::now();
        let addr = self.nodes[i].client_addr();
        let secure = self.nodes[i].secure_addr();
        loop {
            if let Ok(answer) = fourlw::ask(addr, "srvr").await {
                // The secure port opens after the plaintext one: wait until it accepts too.
                let secure_open = match secure {
                    None => true,
                    Some(at) => tokio::net::TcpStream::connect(at).await.is_ok(),
                };
                if fourlw::parse_mode(&answer).is_some() && secure_open {
                    return Ok(());
                }
            }
            let node = &mut self.nodes[i];
            let exited = match node.child.as_mut() {
                Some(child) => child.try_wait().map_err(HarnessError::io("polling a server"))?.is_some(),
                None => node.install.is_some(),
            };
            if exited || started.elapsed() > self.config.ready_timeout {
                return Err(HarnessError::NotReady {
                    node: i,
                    waited_ms: started.elapsed().as_millis(),
                    log: node.log_path(),
                    log_tail: crate::resource::log_tail(&node.log_path(), 20),
                });
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    fn link(&self, from: usize, to: usize) -> Option<&Link> {
        self.links.iter().find(|l| l.from == from && l.to == to)
    }

    fn is_running(&self, i: usize) -> bool {
        #[cfg(feature = "docker")]
        if self.docker.is_some() {
            return true;
        }
        self.nodes[i].child.is_some()
    }

    fn node(&self, i: usize) -> Result<&Node, HarnessError> {
        self.nodes.get(i).ok_or(HarnessError::NoSuchNode(i))
    }

    fn pid_of(&self, i: usize) -> Result<u32, HarnessError> {
        self.node(i)?
            .child
            .as_ref()
            .map(Child::id)
            .ok_or(HarnessError::Unsupported("signalling a stopped node", "local"))
    }

    /// The number of servers.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always `false`: a cluster has at least one server.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The direct connect string, `127.0.0.1:p1,127.0.0.1:p2,...`.
    pub fn connect_string(&self) -> String {
        self.nodes.iter().map(|n| n.client_addr().to_string()).collect::<Vec<_>>().join(",")
    }

    /// The connect string of the servers' TLS ports, or `None` for a cluster started without
    /// [`ClusterConfig::tls`].
    pub fn secure_connect_string(&self) -> Option<String> {
        let addrs: Option<Vec<String>> =
            self.nodes.iter().map(|n| n.secure_addr().map(|a| a.to_string())).collect();
        addrs.map(|a| a.join(","))
    }

    /// The CA and client identities of a TLS cluster (see [`TlsFiles`]), or `None`.
    pub fn tls_files(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
    }

    /// The direct connect string with a chroot suffix, e.g. `connect_string_chroot("/app")`.
    pub fn connect_string_chroot(&self, chroot: &str) -> String {
        format!("{}{}", self.connect_string(), chroot)
    }

    /// The client address of node `i`.
    ///
    /// # Errors
    /// [`HarnessError::NoSuchNode`].
    pub fn client_addr(&self, i: usize) -> Result<SocketAddr, HarnessError> {
        Ok(self.node(i)?.client_addr())
    }

    /// The PID of node `i`'s server process, while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.nodes.get(i)?.child.as_ref().map(Child::id)
    }

    /// The PIDs of every running server.
    pub fn pids(&self) -> Vec<u32> {
        self.nodes.iter().filter_map(|n| n.child.as_ref().map(Child::id)).collect()
    }

    /// The cluster's temporary directory (node directories, configs and logs).
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_ref().map(|d| d.path())
    }

    /// A new fault proxy in front of every node. Give each client that a test wants to fault on
    /// its own a proxy of its own.
    ///
    /// # Errors
    /// [`HarnessError::Io`] when a listener cannot be bound.
    pub fn proxy(&self) -> Result<FaultProxy, HarnessError> {
        FaultProxy::start(&self.nodes.iter().map(Node::client_addr).collect::<Vec<_>>())
    }

    /// A new fault proxy in front of every node's secure (TLS) port: the TLS handshake passes
    /// through it. `None` for a cluster without TLS.
    ///
    /// # Errors
    /// [`HarnessError::Io`] when a listener cannot be bound.
    pub fn secure_proxy(&self) -> Option<Result<FaultProxy, HarnessError>> {
        let addrs: Option<Vec<SocketAddr>> = self.nodes.iter().map(Node::secure_addr).collect();
        addrs.map(|addrs| FaultProxy::start(&addrs))
    }

    /// Stops node `i` gracefully (SIGTERM), waiting up to 10 s before SIGKILL.
    ///
    /// # Errors
    /// [`HarnessError::NoSuchNode`], or an OS error signalling the process.
    pub async fn stop(&mut self, i: usize) -> Result<(), HarnessError> {
        self.end(i, libc::SIGTERM, Duration::from_secs(10)).await
    }

    /// Kills node `i` with SIGKILL, like a crash, and reaps it.
    ///
    /// # Errors
    /// As [`ZkCluster::stop`].
    pub async fn kill(&mut self, i: usize) -> Result<(), HarnessError> {
        self.end(i, libc::SIGKILL, Duration::ZERO).await
    }

    async fn end(&mut self, i: usize, sig: libc::c_int, grace: Duration) -> Result<(), HarnessError> {
        #[cfg(feature = "docker")]
        if let Some(docker) = &self.docker {
            self.node(i)?;
            return if sig == libc::SIGKILL { docker.docker("kill") } else { docker.stop().await };
        }
        let node = self.nodes.get_mut(i).ok_or(HarnessError::NoSuchNode(i))?;
        let Some(mut child) = node.child.take() else { return Ok(()) };
        let pid = child.id();
        // A frozen process does not act on SIGTERM until continued.
        let _ = local::signal(pid, libc::SIGCONT);
        local::signal(pid, sig)?;
        let deadline = Instant::now() + grace;
        loop {
            if child.try_wait().map_err(HarnessError::io("reaping a server"))?.is_some() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let _ = local::signal(pid, libc::SIGKILL);
                child.wait().map_err(HarnessError::io("reaping a killed server"))?;
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts node `i` again (stopping it first if it runs) on the same ports and data, and
    /// waits until it serves. A server that exits before serving is started once more, after
    /// its log's tail is written to stderr (a restart cannot move to fresh ports, as a first
    /// start does: its peers and clients know these).
    ///
    /// # Errors
    /// As [`ZkCluster::stop`], and [`HarnessError::NotReady`] (with the log's tail) when the
    /// second start fails too; [`HarnessError::WrongVersion`] when it reports another version
    /// than its own.
    pub async fn restart(&mut self, i: usize) -> Result<(), HarnessError> {
        self.stop(i).await?;
        self.spawn(i)?;
        match self.wait_ready(i).await {
            Err(first @ HarnessError::NotReady { .. }) if !self.is_running_now(i) => {
                eprintln!("zk-testcluster: node {i} exited while restarting; starting it once more. {first}");
                self.stop(i).await?;
                self.spawn(i)?;
                self.wait_ready(i).await?;
            }
            other => other?,
        }
        self.check_version(i).await
    }

    /// Whether node `i`'s process is alive (local backend; the Docker backend says yes).
    fn is_running_now(&mut self, i: usize) -> bool {
        match self.nodes.get_mut(i).and_then(|n| n.child.as_mut()) {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => self.is_running(i),
        }
    }

    /// As [`ZkCluster::restart`], with `env` added to node `i`'s environment for this start and
    /// every later one (until the next call; an empty `env` restores the plain environment).
    /// For example `LD_PRELOAD` of libfaketime with `FAKETIME`, to run one server's clock
    /// fast. Local backend only.
    ///
    /// # Errors
    /// As [`ZkCluster::restart`]; [`HarnessError::NoSuchNode`].
    pub async fn restart_with_env(&mut self, i: usize, env: &[(String, String)]) -> Result<(), HarnessError> {
        self.nodes.get_mut(i).ok_or(HarnessError::NoSuchNode(i))?.env = env.to_vec();
        self.restart(i).await
    }

    /// Node `i`'s role from `srvr`, or `None` while it is not serving.
    pub async fn mode(&self, i: usize) -> Option<Mode> {
        let addr = self.nodes.get(i)?.client_addr();
        fourlw::parse_mode(&fourlw::ask(addr, "srvr").await.ok()?)
    }

    /// The index of the node that leads (or the standalone server).
    ///
    /// # Errors
    /// [`HarnessError::NoLeader`] when no node reports `leader` or `standalone`.
    pub async fn leader(&self) -> Result<usize, HarnessError> {
        for i in 0..self.nodes.len() {
            if self.is_running(i) && matches!(self.mode(i).await, Some(Mode::Leader | Mode::Standalone)) {
                return Ok(i);
            }
        }
        Err(HarnessError::NoLeader)
    }

    /// Waits until some node leads, up to the ready timeout, and returns its index.
    ///
    /// # Errors
    /// [`HarnessError::NoLeader`] when none leads in time.
    pub async fn wait_for_leader(&self) -> Result<usize, HarnessError> {
        let deadline = Instant::now() + self.config.ready_timeout;
        loop {
            match self.leader().await {
                Ok(i) => return Ok(i),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(25)).await,
            }
        }
    }

    /// Sends any whitelisted four-letter word (`wchp`, `cons`, `dump`, ...) to node `i`.
    ///
    /// # Errors
    /// [`HarnessError::NoSuchNode`], or [`HarnessError::Io`] when the node does not answer.
    pub async fn four_letter(&self, i: usize, word: &str) -> Result<String, HarnessError> {
        let addr = self.node(i)?.client_addr();
        fourlw::ask(addr, word).await.map_err(HarnessError::io(format!("{word} on node {i}")))
    }

    /// Keeps the cluster's directory, with every server's log, when the cluster is dropped
    /// (its path is printed on stderr then), as `ZK_TEST_KEEP_LOGS=always` would: for a run
    /// that found something worth reading the servers' side of.
    pub fn keep_logs(&mut self) {
        self.keep_logs = true;
    }

    /// Node `i`'s `mntr` counters.
    ///
    /// # Errors
    /// [`HarnessError::NoSuchNode`], or [`HarnessError::Io`] when the node does not answer.
    pub async fn mntr(&self, i: usize) -> Result<Mntr, HarnessError> {
        let addr = self.node(i)?.client_addr();
        let text = fourlw::ask(addr, "mntr").await.map_err(HarnessError::io(format!("mntr on node {i}")))?;
        Ok(Mntr(fourlw::parse_mntr(&text)))
    }
}

impl Drop for ZkCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = local::signal(child.id(), libc::SIGKILL);
                let _ = child.wait();
            }
        }
        // The log disks go before the directory they are mounted in.
        self.grey.unmount();
        let keep = self.keep_logs
            || match std::env::var("ZK_TEST_KEEP_LOGS").as_deref() {
                Ok("always") => true,
                Ok("") | Ok("0") | Err(_) => false,
                Ok(_) => std::thread::panicking(),
            };
        if let Some(dir) = self.dir.take() {
            if keep {
                let path = dir.keep();
                eprintln!("zk-testcluster: kept server logs in {}", path.display());
            }
        }
    }
}
