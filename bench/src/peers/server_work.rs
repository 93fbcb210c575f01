//! What the servers did during a run, from their own counters.

use zk_testcluster::ZkCluster;

use crate::clock::process_cpu_ns;

/// The servers' side of a run: packets (received + sent, `mntr`) and CPU time (user + system of
/// every node's JVM, `None` when a node's process can't be read), summed over every node.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServerWork {
    pub packets: i64,
    pub cpu_ns: Option<u64>,
}

impl ServerWork {
    /// The cluster's counters now.
    pub async fn read(zk: &ZkCluster) -> Result<ServerWork, String> {
        let mut packets = 0;
        for i in 0..zk.len() {
            packets += zk.mntr(i).await.map_err(|e| e.to_string())?.packets();
        }
        let pids = zk.pids();
        let cpu_ns = if pids.len() == zk.len() {
            pids.iter().map(|&pid| process_cpu_ns(pid)).sum::<Option<u64>>()
        } else {
            None
        };
        Ok(ServerWork { packets, cpu_ns })
    }

    /// The work done since `self` was read.
    pub async fn since(self, zk: &ZkCluster) -> Result<ServerWork, String> {
        let now = ServerWork::read(zk).await?;
        Ok(ServerWork {
            packets: now.packets - self.packets,
            cpu_ns: now.cpu_ns.zip(self.cpu_ns).map(|(a, b)| a.saturating_sub(b)),
        })
    }
}
