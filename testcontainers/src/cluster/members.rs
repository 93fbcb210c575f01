//! Ensembles that change: a server moved to another loopback address, members added to a
//! running ensemble and taken out of it (dynamic reconfiguration, [`ClusterConfig::reconfig`]).
//!
//! The `reconfig` requests themselves are the test's to send (`Client::update_ensemble`, with
//! [`ZkCluster::member_spec`]): the harness starts and stops the servers and keeps the configs
//! it writes in step.

use std::net::Ipv4Addr;

use super::{Node, ZkCluster};
use crate::local::LocalInstall;
use crate::ports::free_ports;
use crate::HarnessError;

#[cfg(doc)]
use super::ClusterConfig;

impl ZkCluster {
    /// Stops node `i`, and starts it again with its client port bound on `host` (a loopback
    /// address: the whole of 127.0.0.0/8 is loopback on Linux) instead, on the same port and
    /// data: a server rescheduled at a new address. [`ZkCluster::connect_string`] and
    /// [`ZkCluster::client_addr`] give the new address from then on. The other servers are not
    /// told: they reach it on its quorum ports, which do not move.
    ///
    /// # Errors
    /// As [`ZkCluster::restart`]; [`HarnessError::Unsupported`] for a host that is not
    /// loopback, or with dynamic reconfiguration (the address is in the ensemble's
    /// configuration there: `reconfig` it).
    pub async fn move_client_address(&mut self, i: usize, host: Ipv4Addr) -> Result<(), HarnessError> {
        if !host.is_loopback() {
            return Err(HarnessError::Unsupported("a client address off loopback", "local"));
        }
        if self.config.reconfig {
            return Err(HarnessError::Unsupported("moving a server", "a reconfigurable ensemble"));
        }
        self.stop(i).await?;
        self.nodes.get_mut(i).ok_or(HarnessError::NoSuchNode(i))?.host = host;
        let node = &self.nodes[i];
        std::fs::write(node.cfg_path(), self.zoo_cfg(i)).map_err(HarnessError::io("writing zoo.cfg"))?;
        self.restart(i).await
    }

    /// Starts a new server ([`ClusterConfig::version`]) that joins the running ensemble (started
    /// with [`ClusterConfig::reconfig`]) and returns its index, once it serves (synced with the
    /// leader, not yet a voting member). Its config names the members as the harness knows them
    /// and itself; make it a member with a `reconfig` that adds [`ZkCluster::member_spec`].
    ///
    /// # Errors
    /// [`HarnessError::Unsupported`] without [`ClusterConfig::reconfig`] (or on a standalone
    /// server, or with TLS or proxied links); [`HarnessError::NotReady`] when it does not come
    /// up; [`HarnessError::Io`].
    pub async fn add_member(&mut self) -> Result<usize, HarnessError> {
        let dir = self.dir.as_ref().map(|d| d.path().to_path_buf());
        let unsupported = !self.config.reconfig
            || self.nodes.len() < 2
            || self.tls.is_some()
            || !self.links.is_empty()
            || self.nodes[0].install.is_none();
        let (Some(dir), false) = (dir, unsupported) else {
            return Err(HarnessError::Unsupported("adding a member", "this cluster"));
        };
        let i = self.nodes.len();
        let version = self.config.version;
        let install = LocalInstall::find(version)?;
        let ports = free_ports(3)?;
        let node = Node {
            host: Ipv4Addr::LOCALHOST,
            member: false,
            client_port: ports[0],
            quorum_port: ports[1],
            election_port: ports[2],
            secure_port: None,
            dir: dir.join(format!("node{}", i + 1)),
            child: None,
            env: Vec::new(),
            version,
            install: Some(install),
        };
        let data = node.dir.join("data");
        std::fs::create_dir_all(&data).map_err(HarnessError::io(format!("creating {}", data.display())))?;
        std::fs::write(data.join("myid"), format!("{}\n", i + 1))
            .map_err(HarnessError::io("writing myid"))?;
        self.nodes.push(node);
        std::fs::write(self.nodes[i].cfg_path(), self.zoo_cfg(i))
            .map_err(HarnessError::io("writing zoo.cfg"))?;
        self.spawn(i)?;
        self.wait_ready(i).await?;
        self.check_version(i).await?;
        // From now on the configs the harness writes name it (a `reconfig` adds it).
        self.nodes[i].member = true;
        Ok(i)
    }

    /// Node `i`'s line for a `reconfig` that adds it:
    /// `server.N=127.0.0.1:QUORUM:ELECTION:participant;HOST:CLIENT`.
    ///
    /// # Errors
    /// [`HarnessError::NoSuchNode`].
    pub fn member_spec(&self, i: usize) -> Result<String, HarnessError> {
        let n = self.node(i)?;
        Ok(format!(
            "server.{}=127.0.0.1:{}:{}:participant;{}:{}",
            i + 1,
            n.quorum_port,
            n.election_port,
            n.host,
            n.client_port
        ))
    }

    /// Node `i`'s id in the ensemble (`N` of its `server.N` line), for a `reconfig` that removes
    /// it.
    ///
    /// # Errors
    /// [`HarnessError::NoSuchNode`].
    pub fn member_id(&self, i: usize) -> Result<u64, HarnessError> {
        self.node(i)?;
        Ok(i as u64 + 1)
    }

    /// Stops node `i` (gracefully, as [`ZkCluster::stop`]) after a `reconfig` removed it: the
    /// configs the harness writes from now on (a member added later) leave it out.
    ///
    /// # Errors
    /// As [`ZkCluster::stop`].
    pub async fn remove_member(&mut self, i: usize) -> Result<(), HarnessError> {
        self.nodes.get_mut(i).ok_or(HarnessError::NoSuchNode(i))?.member = false;
        self.stop(i).await
    }
}
