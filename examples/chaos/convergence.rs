//! Replica convergence, after every run: each server read directly (its own client port, one
//! session each, no `sync`: each replica's own view), once every server reports the same zxid;
//! every node's children, data and stat compared across the servers. Any difference fails the
//! run, but one: a parent's `pzxid` alone. ZooKeeper itself sets a parent's `cversion` and
//! `pzxid` from the transaction it replays when a restarted server's fuzzy snapshot already
//! holds the child (`DataTree.processTxn`, "Adjusting parent cversion"; `setCversionPzxid`), so
//! a restarted replica can hold another `pzxid` with the same children, `cversion` and data.
//! The recipes never read `pzxid`; such a difference is printed as a note, not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use zk_recipes::{ConnectOptions, Session};
use zk_testcluster::ZkCluster;
use zookeeper_client::Client;

use crate::Error;

/// How long the servers get to agree on a zxid (after the last fault has healed).
const SETTLE: Duration = Duration::from_secs(60);
/// How many times a snapshot is taken again when a transaction landed while it was read (a
/// session of the run expiring late, say).
const ATTEMPTS: usize = 5;

/// A node's stat, as the servers report it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeStat {
    pub czxid: i64,
    pub mzxid: i64,
    pub pzxid: i64,
    pub ctime: i64,
    pub mtime: i64,
    pub version: i32,
    pub cversion: i32,
    pub aversion: i32,
    pub ephemeral_owner: i64,
    pub data_length: i32,
    pub num_children: i32,
}

impl From<&zookeeper_client::Stat> for NodeStat {
    fn from(s: &zookeeper_client::Stat) -> Self {
        NodeStat {
            czxid: s.czxid,
            mzxid: s.mzxid,
            pzxid: s.pzxid,
            ctime: s.ctime,
            mtime: s.mtime,
            version: s.version,
            cversion: s.cversion,
            aversion: s.aversion,
            ephemeral_owner: s.ephemeral_owner,
            data_length: s.data_length,
            num_children: s.num_children,
        }
    }
}

/// One node as one server has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeView {
    pub data: Vec<u8>,
    pub stat: NodeStat,
    pub children: Vec<String>,
}

/// One server's whole tree (but `/zookeeper`), by path.
pub type Snapshot = BTreeMap<String, NodeView>;

/// What the check found: the zxid the servers agreed on, the nodes compared, the differences.
pub struct Outcome {
    pub zxid: Option<u64>,
    pub nodes: usize,
    pub differences: Vec<String>,
    /// Parents whose `pzxid` alone differs (see the module's docs): printed, not counted.
    pub notes: Vec<String>,
}

/// Every difference between the servers' snapshots, one line each (empty: they converged),
/// but those of a `pzxid` alone: [`pzxid_only`].
#[cfg(test)]
fn diff(snapshots: &[Snapshot]) -> Vec<String> {
    compare(snapshots).0
}

/// The nodes whose stats differ between the servers in their `pzxid` alone (see the module's
/// docs), one line each.
#[cfg(test)]
fn pzxid_only(snapshots: &[Snapshot]) -> Vec<String> {
    compare(snapshots).1
}

/// The differences, and the `pzxid`-only ones apart.
fn compare(snapshots: &[Snapshot]) -> (Vec<String>, Vec<String>) {
    let (mut out, mut notes) = (Vec::new(), Vec::new());
    let paths: BTreeSet<&String> = snapshots.iter().flat_map(|s| s.keys()).collect();
    for path in paths {
        let views: Vec<Option<&NodeView>> = snapshots.iter().map(|s| s.get(path)).collect();
        let present: Vec<usize> = (0..views.len()).filter(|&i| views[i].is_some()).collect();
        if present.len() != views.len() {
            let missing: Vec<usize> = (0..views.len()).filter(|i| !present.contains(i)).collect();
            out.push(format!("{path}: on servers {present:?}, missing on servers {missing:?}"));
            continue;
        }
        let first = views[0].expect("present everywhere");
        for (j, view) in views.iter().enumerate().skip(1) {
            let view = view.expect("present everywhere");
            if view.data != first.data {
                out.push(format!(
                    "{path}: data differs: server 0 {:?}, server {j} {:?}",
                    String::from_utf8_lossy(&first.data),
                    String::from_utf8_lossy(&view.data)
                ));
            }
            let same_but_pzxid = NodeStat { pzxid: first.stat.pzxid, ..view.stat.clone() } == first.stat;
            if view.stat != first.stat && same_but_pzxid {
                notes.push(format!(
                    "{path}: pzxid differs: server 0 {:#x}, server {j} {:#x}",
                    first.stat.pzxid, view.stat.pzxid
                ));
            } else if view.stat != first.stat {
                out.push(format!(
                    "{path}: stat differs: server 0 {:?}, server {j} {:?}",
                    first.stat, view.stat
                ));
            }
            if view.children != first.children {
                out.push(format!(
                    "{path}: children differ: server 0 {:?}, server {j} {:?}",
                    first.children, view.children
                ));
            }
        }
    }
    (out, notes)
}

/// The servers to compare: those that run (a server stopped for good, say removed by a
/// `reconfig`, is left out); every one when the harness knows no process (Docker).
fn serving(zk: &ZkCluster) -> Vec<usize> {
    let running: Vec<usize> = (0..zk.len()).filter(|&i| zk.pid(i).is_some()).collect();
    if running.is_empty() {
        (0..zk.len()).collect()
    } else {
        running
    }
}

/// Server `i`'s last zxid, from `srvr` (`None` while it does not serve).
async fn zxid(zk: &ZkCluster, i: usize) -> Option<u64> {
    let srvr = zk.four_letter(i, "srvr").await.ok()?;
    srvr.lines().find_map(|l| l.strip_prefix("Zxid: 0x")).and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
}

/// The zxid every server reports, once they all report the same one (up to [`SETTLE`]).
async fn agreed_zxid(zk: &ZkCluster) -> Result<u64, Error> {
    let until = Instant::now() + SETTLE;
    loop {
        let mut all = Vec::with_capacity(zk.len());
        for i in serving(zk) {
            all.push(zxid(zk, i).await);
        }
        if let Some(Some(z)) = all.first() {
            if all.iter().all(|x| *x == Some(*z)) {
                return Ok(*z);
            }
        }
        if Instant::now() >= until {
            return Err(format!("the servers did not agree on a zxid within {SETTLE:?}: {all:x?}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One server's tree, read through `client` (connected to that server only), breadth first.
async fn snapshot(client: &Client) -> Result<Snapshot, Error> {
    let mut snap = Snapshot::new();
    let mut queue = vec!["/".to_string()];
    while let Some(path) = queue.pop() {
        let (data, stat) = client.get_data(&path).await?;
        let mut children = client.list_children(&path).await?;
        children.sort();
        for child in &children {
            let full = if path == "/" { format!("/{child}") } else { format!("{path}/{child}") };
            if full != "/zookeeper" {
                queue.push(full);
            }
        }
        let children = children.into_iter().filter(|c| !(path == "/" && c == "zookeeper")).collect();
        snap.insert(path, NodeView { data, stat: NodeStat::from(&stat), children });
    }
    Ok(snap)
}

/// Reads every server directly, each through a `Session` of its own with `options` (the chaos
/// run's SASL, under `--sasl`), and compares their trees.
pub async fn check(zk: &ZkCluster, options: &ConnectOptions) -> Result<Outcome, Error> {
    // Every session first: opening one is a transaction.
    let mut sessions = Vec::with_capacity(zk.len());
    for i in serving(zk) {
        let addr = zk.client_addr(i)?.to_string();
        sessions.push(Session::connect_with(&addr, options).await?);
    }
    let clients = sessions.iter().map(Session::client).collect::<Result<Vec<_>, _>>()?;
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let before = agreed_zxid(zk).await?;
        let mut snapshots = Vec::with_capacity(clients.len());
        for c in &clients {
            snapshots.push(snapshot(c).await?);
        }
        let after = agreed_zxid(zk).await?;
        let (differences, notes) = compare(&snapshots);
        let nodes = snapshots.first().map_or(0, BTreeMap::len);
        last = Some(Outcome { zxid: Some(after), nodes, differences, notes });
        if before == after {
            break;
        }
    }
    for session in sessions {
        session.close().await;
    }
    let none = || vec!["no snapshot taken".to_string()];
    Ok(last.unwrap_or(Outcome { zxid: None, nodes: 0, differences: none(), notes: Vec::new() }))
}

/// Prints the outcome; returns the number of differences (each one fails the run).
pub fn print(outcome: &Result<Outcome, Error>) -> usize {
    if let Ok(o) = outcome {
        for note in &o.notes {
            println!("convergence note (a restarted server's snapshot replay, not counted): {note}");
        }
    }
    match outcome {
        Ok(o) if o.differences.is_empty() => {
            let zxid = o.zxid.map_or("-".into(), |z| format!("{z:#x}"));
            println!(
                "convergence: every server has the same {} nodes (data and stat) at zxid {zxid}",
                o.nodes
            );
            0
        }
        Ok(o) => {
            println!("convergence: {} DIFFERENCES between the servers:", o.differences.len());
            for d in o.differences.iter().take(50) {
                println!("  {d}");
            }
            o.differences.len()
        }
        Err(e) => {
            println!("convergence: could not compare the servers: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(data: &str, mzxid: i64, children: &[&str]) -> NodeView {
        NodeView {
            data: data.as_bytes().to_vec(),
            stat: NodeStat {
                czxid: 1,
                mzxid,
                pzxid: 1,
                ctime: 10,
                mtime: 10,
                version: 0,
                cversion: children.len() as i32,
                aversion: 0,
                ephemeral_owner: 0,
                data_length: data.len() as i32,
                num_children: children.len() as i32,
            },
            children: children.iter().map(|c| c.to_string()).collect(),
        }
    }

    fn snap(nodes: &[(&str, NodeView)]) -> Snapshot {
        nodes.iter().map(|(p, n)| (p.to_string(), n.clone())).collect()
    }

    fn healthy() -> Snapshot {
        snap(&[
            ("/", node("", 0, &["chaos"])),
            ("/chaos", node("", 2, &["mutex"])),
            ("/chaos/mutex", node("", 3, &["lock-0000000001"])),
            ("/chaos/mutex/lock-0000000001", node("p0w1", 4, &[])),
        ])
    }

    #[test]
    fn identical_replicas_converge() {
        assert!(diff(&[healthy(), healthy(), healthy()]).is_empty());
    }

    #[test]
    fn a_node_missing_on_one_replica_is_caught() {
        let mut lagging = healthy();
        lagging.remove("/chaos/mutex/lock-0000000001");
        lagging.insert("/chaos/mutex".into(), node("", 3, &[]));
        let d = diff(&[healthy(), healthy(), lagging]);
        assert!(
            d.iter()
                .any(|l| l
                    .starts_with("/chaos/mutex/lock-0000000001: on servers [0, 1], missing on servers [2]")),
            "{d:?}"
        );
        assert!(d.iter().any(|l| l.starts_with("/chaos/mutex: children differ")), "{d:?}");
    }

    #[test]
    fn a_different_data_or_stat_is_caught() {
        let mut other = healthy();
        other.insert("/chaos/mutex/lock-0000000001".into(), node("p1w0", 4, &[]));
        let d = diff(&[healthy(), other]);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].contains("data differs"), "{d:?}");

        let mut other = healthy();
        let mut n = node("p0w1", 4, &[]);
        n.stat.ephemeral_owner = 0x1234;
        other.insert("/chaos/mutex/lock-0000000001".into(), n);
        let d = diff(&[healthy(), other]);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].contains("stat differs"), "{d:?}");
    }

    #[test]
    fn a_pzxid_alone_is_a_note_and_a_cversion_is_a_difference() {
        let mut other = healthy();
        let mut n = node("", 3, &["lock-0000000001"]);
        n.stat.pzxid = 7;
        other.insert("/chaos/mutex".into(), n.clone());
        assert!(diff(&[healthy(), other.clone()]).is_empty());
        assert_eq!(pzxid_only(&[healthy(), other]).len(), 1);

        let mut other = healthy();
        n.stat.cversion += 1;
        other.insert("/chaos/mutex".into(), n);
        let d = diff(&[healthy(), other]);
        assert!(d.len() == 1 && d[0].contains("stat differs"), "{d:?}");
    }

    #[test]
    fn a_node_only_one_replica_has_is_caught() {
        let mut extra = healthy();
        extra.insert("/chaos/ghost".into(), node("", 9, &[]));
        let d = diff(&[healthy(), extra, healthy()]);
        assert!(
            d.iter().any(|l| l.starts_with("/chaos/ghost: on servers [1], missing on servers [0, 2]")),
            "{d:?}"
        );
    }
}
