//! Whole-server faults: freezing a server (SIGSTOP) and partitions between servers.

use std::time::Duration;

use super::ZkCluster;
use crate::{local, HarnessError};

impl ZkCluster {
    /// Freezes node `i` with SIGSTOP: its sockets stay open but it answers nothing. Returns once
    /// every thread of the server has stopped.
    ///
    /// # Errors
    /// As [`ZkCluster::stop`].
    pub fn freeze(&self, i: usize) -> Result<(), HarnessError> {
        #[cfg(feature = "docker")]
        if let Some(docker) = &self.docker {
            self.node(i)?;
            return docker.docker("pause");
        }
        let pid = self.pid_of(i)?;
        local::signal(pid, libc::SIGSTOP)?;
        // kill(2) returns before every thread has stopped: return only once they all have.
        local::wait_stopped(pid, Duration::from_secs(5))
    }

    /// Thaws node `i` with SIGCONT.
    ///
    /// # Errors
    /// As [`ZkCluster::stop`].
    pub fn thaw(&self, i: usize) -> Result<(), HarnessError> {
        #[cfg(feature = "docker")]
        if let Some(docker) = &self.docker {
            self.node(i)?;
            return docker.docker("unpause");
        }
        local::signal(self.pid_of(i)?, libc::SIGCONT)
    }

    /// Cuts node `k` off from every other server, as a network partition between servers would:
    /// every pair proxy to and from `k` stops forwarding (bytes are held, not refused) and its
    /// open connections are closed, so the quorum and election connections between `k` and the
    /// others die and new ones stall until [`ZkCluster::heal_partition`]. Clients still reach
    /// `k`'s client port: a leader cut off from its quorum steps down (within `syncLimit` ticks)
    /// and its clients must move to a server of the majority, which elects a new leader.
    ///
    /// # Errors
    /// [`HarnessError::NotPartitionable`] for a cluster started without
    /// [`ClusterConfig::partitionable`](crate::ClusterConfig::partitionable) (or a standalone
    /// one), [`HarnessError::NoSuchNode`].
    pub fn partition(&self, k: usize) -> Result<(), HarnessError> {
        if self.links.is_empty() {
            return Err(HarnessError::NotPartitionable);
        }
        self.node(k)?;
        let cut_off = self.links.iter().filter(|l| l.from == k || l.to == k).collect::<Vec<_>>();
        // Blackhole first, so that connections opened after the cut stall instead of passing.
        for link in &cut_off {
            link.proxy.blackhole();
        }
        for link in &cut_off {
            link.proxy.cut();
        }
        tracing::debug!(node = k, proxies = cut_off.len(), "partitioned");
        Ok(())
    }

    /// Ends every [`ZkCluster::partition`] and [`ZkCluster::partition_one_way`]: the pair
    /// proxies forward again (what they held flows), and the servers reconnect on their own.
    /// (A [`ZkCluster::delay_link`] stays until set to zero.)
    ///
    /// # Errors
    /// [`HarnessError::NotPartitionable`] as for [`ZkCluster::partition`].
    pub fn heal_partition(&self) -> Result<(), HarnessError> {
        if self.links.is_empty() {
            return Err(HarnessError::NotPartitionable);
        }
        for link in &self.links {
            link.proxy.heal();
        }
        Ok(())
    }
}
