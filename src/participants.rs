//! Who is in a queue, in order.

use zookeeper_client::MultiReadResult;

use crate::error::Result;
use crate::naming::read_data;
use crate::queue::{Admission, Decision, Queue};

/// One contender in a queue, as `participants()` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Participant {
    /// Position in the queue, 0 first.
    pub position: usize,
    /// The node's name under the lock path.
    pub node: String,
    /// The participant id stored in the node (UTF-8, lossy): its data up to the first newline.
    pub id: String,
    /// The value the participant proclaimed while it led ([`crate::LeaderLatch::proclaim`]):
    /// its node's data after the first newline; empty if none.
    pub value: Vec<u8>,
    /// Whether the recipe's rule admits it now (it holds the lock, or leads).
    pub is_holder: bool,
    /// The session that owns the node (`ephemeralOwner`).
    pub session: i64,
    /// The node's `czxid`, its fencing token.
    pub czxid: i64,
    /// When the node was created, in milliseconds since the epoch (server clock).
    pub ctime_ms: i64,
    /// What ties its session to others ([`crate::LockOptions::owner`]); empty for most
    /// contenders, and for Curator's and kazoo's.
    pub party: crate::naming::Party,
}

/// Lists the queue in order with each node's data and owner, read in one multi-read.
pub(crate) async fn list(queue: &Queue, rule: &dyn Admission) -> Result<Vec<Participant>> {
    let conn = queue.conn().await?;
    let children = queue.list_on(&conn).await?;
    let nodes = queue.sorted(&children)?;
    if nodes.is_empty() {
        return Ok(Vec::new());
    }
    let results = queue.read_nodes(&conn, &nodes).await?;
    // Nodes gone between the listing and the read are left out; positions follow what remains.
    let present: Vec<_> = nodes
        .into_iter()
        .zip(results)
        .filter_map(|(node, result)| match result {
            MultiReadResult::Data { data, stat } => Some((node, data, stat)),
            _ => None,
        })
        .collect();
    let queue_now: Vec<_> = present.iter().map(|(n, _, _)| n.clone()).collect();
    Ok(present
        .into_iter()
        .enumerate()
        .map(|(position, (node, data, stat))| {
            let (id, value, party) = read_data(&data);
            Participant {
                party,
                position,
                is_holder: rule.decide(&queue_now, position) == Decision::Proceed,
                id,
                value,
                node: node.name.into_owned(),
                session: stat.ephemeral_owner,
                czxid: stat.czxid,
                ctime_ms: stat.ctime,
            }
        })
        .collect())
}
