//! Reading the tree under a root: every path listed level by level (a multi-read per batch of
//! paths), every queue's nodes read with their data and stat (a multi-read per batch of
//! nodes), within a bound on the nodes read. Reads only.

use zookeeper_client::{Client, Error as ZkError, MultiReadResult};

use super::kinds::{sort_out, Family};
use super::report::{QueueKind, Skipped};
use crate::error::{Error, Result};
use crate::format::NodeFormat;
use crate::naming::{read_data, QueueNode};
use crate::participants::Participant;

/// Paths listed, or nodes read, per multi-read.
const BATCH: usize = 100;

/// One queue read: its nodes in order (those gone before their read left out), and each
/// node's participant (`is_holder` not yet known).
pub(crate) struct Found {
    pub path: String,
    pub kind: QueueKind,
    pub format: NodeFormat,
    pub nodes: Vec<QueueNode<'static>>,
    pub members: Vec<Participant>,
}

/// What a walk read.
#[derive(Default)]
pub(crate) struct Walk {
    pub root_exists: bool,
    pub queues: Vec<Found>,
    pub skipped: Vec<Skipped>,
    pub nodes_read: usize,
    pub truncated: bool,
}

fn child(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// Reads every queue at or under `root`, at most `max_nodes` nodes in all.
pub(crate) async fn walk(client: &Client, root: &str, max_nodes: usize) -> Result<Walk> {
    let mut walk = Walk { root_exists: true, ..Walk::default() };
    let mut level = vec![root.to_string()];
    while !level.is_empty() {
        let mut next = Vec::new();
        for batch in level.chunks(BATCH) {
            let room = max_nodes.saturating_sub(walk.nodes_read);
            let batch = if batch.len() > room {
                walk.truncated = true;
                &batch[..room]
            } else {
                batch
            };
            if batch.is_empty() {
                return Ok(walk);
            }
            let listings = list(client, batch).await?;
            walk.nodes_read += batch.len();
            for (path, children) in batch.iter().zip(listings) {
                let Some(children) = children else {
                    walk.root_exists &= path != root;
                    continue;
                };
                let sorted = sort_out(path, children);
                if let Some(reason) = sorted.refused {
                    walk.skipped.push(Skipped { path: path.clone(), reason });
                }
                if let Some((family, nodes)) = sorted.queue {
                    if walk.nodes_read + nodes.len() > max_nodes {
                        // A queue read in part would name the wrong holders: left out.
                        walk.truncated = true;
                    } else {
                        walk.nodes_read += nodes.len();
                        walk.queues.push(read_queue(client, path, family, nodes).await?);
                    }
                }
                let skip_system = path == "/";
                next.extend(
                    sorted
                        .others
                        .iter()
                        .filter(|c| !(skip_system && *c == "zookeeper"))
                        .map(|c| child(path, c)),
                );
            }
        }
        next.sort();
        level = next;
    }
    walk.queues.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(walk)
}

/// Reads the queues at `paths` again (not under them): those still there.
pub(crate) async fn reread(client: &Client, paths: &[String]) -> Result<Vec<Found>> {
    let mut found = Vec::new();
    for batch in paths.chunks(BATCH) {
        for (path, children) in batch.iter().zip(list(client, batch).await?) {
            if let Some((family, nodes)) = children.and_then(|c| sort_out(path, c).queue) {
                found.push(read_queue(client, path, family, nodes).await?);
            }
        }
    }
    Ok(found)
}

/// The children of each path, `None` for a path gone.
async fn list(client: &Client, paths: &[String]) -> Result<Vec<Option<Vec<String>>>> {
    let mut reader = client.new_multi_reader();
    for path in paths {
        reader.add_get_children(path).map_err(Error::zk("list", path))?;
    }
    let results = reader.commit().await.map_err(Error::zk("multi-read", &paths[0]))?;
    paths
        .iter()
        .zip(results)
        .map(|(path, result)| match result {
            MultiReadResult::Children { children } => Ok(Some(children)),
            MultiReadResult::Error { err: ZkError::NoNode } => Ok(None),
            MultiReadResult::Error { err } => Err(Error::from_zk("list", path, err)),
            _ => Ok(None),
        })
        .collect()
}

/// Reads a queue's nodes (data and stat) and, for a semaphore, its maximum (the path's data).
async fn read_queue(
    client: &Client,
    path: &str,
    family: Family,
    nodes: Vec<QueueNode<'static>>,
) -> Result<Found> {
    let mut kept = Vec::with_capacity(nodes.len());
    let mut members = Vec::with_capacity(nodes.len());
    for batch in nodes.chunks(BATCH) {
        let mut reader = client.new_multi_reader();
        for node in batch {
            reader.add_get_data(&child(path, &node.name)).map_err(Error::zk("get", path))?;
        }
        let results = reader.commit().await.map_err(Error::zk("multi-read", path))?;
        for (node, result) in batch.iter().zip(results) {
            // A node gone between the listing and the read is left out.
            let MultiReadResult::Data { data, stat } = result else { continue };
            let (id, value, party) = read_data(&data);
            members.push(Participant {
                party,
                position: kept.len(),
                node: node.name.to_string(),
                id,
                value,
                is_holder: false,
                session: stat.ephemeral_owner,
                czxid: stat.czxid,
                ctime_ms: stat.ctime,
            });
            kept.push(node.clone());
        }
    }
    let kind = match family {
        Family::Lock => QueueKind::Lock,
        Family::Latch => QueueKind::Election,
        Family::ReadWrite => QueueKind::ReadWrite,
        Family::Kazoo if kept.iter().any(|n| n.marker != crate::markers::WRITER) => QueueKind::ReadWrite,
        Family::Kazoo => QueueKind::Lock,
        Family::Lease => QueueKind::Semaphore { max_leases: max_leases(client, path).await? },
    };
    Ok(Found { path: path.to_string(), kind, format: family.scheme().format, nodes: kept, members })
}

/// A semaphore's maximum, as [`crate::InterProcessSemaphore`] keeps it: the path's data.
async fn max_leases(client: &Client, path: &str) -> Result<Option<u32>> {
    match client.get_data(path).await {
        Ok((data, _)) => {
            Ok(std::str::from_utf8(&data).ok().and_then(|t| t.trim().parse().ok()).filter(|&n| n > 0))
        }
        Err(ZkError::NoNode) => Ok(None),
        Err(e) => Err(Error::from_zk("get", path, e)),
    }
}
