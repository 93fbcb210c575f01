//! What the servers did during a run, from their own counters.

use zk_testcluster::ZkCluster;

use crate::clock::process_cpu_ns;

/// The bytes a `mntr` request adds to the server's `zk_bytes_received_count` (the word itself):
/// the reading that ends a window counts its own, which is not the run's.
const MNTR_BYTES: i64 = 4;

/// The servers' side of a run, summed over every node: packets (received + sent) and bytes
/// (received from clients, and in replies to them) from `mntr`, and CPU time (user + system of
/// every node's JVM, `None` when a node's process can't be read).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServerWork {
    pub packets: i64,
    /// `zk_bytes_received_count`: the requests' bytes as the clients sent them (length prefixes
    /// included).
    pub bytes_in: i64,
    /// `zk_response_bytes`: the replies' bytes, without their length prefixes; watch events and
    /// the replies that open a session are not counted by the server.
    pub bytes_out: i64,
    pub cpu_ns: Option<u64>,
}

impl ServerWork {
    /// The cluster's counters now.
    pub async fn read(zk: &ZkCluster) -> Result<ServerWork, String> {
        let mut work = ServerWork::default();
        for i in 0..zk.len() {
            let m = zk.mntr(i).await.map_err(|e| e.to_string())?;
            work.packets += m.packets();
            work.bytes_in += m.bytes_received();
            work.bytes_out += m.response_bytes();
        }
        let pids = zk.pids();
        work.cpu_ns = if pids.len() == zk.len() {
            pids.iter().map(|&pid| process_cpu_ns(pid)).sum::<Option<u64>>()
        } else {
            None
        };
        Ok(work)
    }

    /// The work done since `self` was read.
    pub async fn since(self, zk: &ZkCluster) -> Result<ServerWork, String> {
        let now = ServerWork::read(zk).await?;
        Ok(ServerWork {
            packets: now.packets - self.packets,
            bytes_in: now.bytes_in - self.bytes_in - MNTR_BYTES * zk.len() as i64,
            bytes_out: now.bytes_out - self.bytes_out,
            cpu_ns: now.cpu_ns.zip(self.cpu_ns).map(|(a, b)| a.saturating_sub(b)),
        })
    }
}
