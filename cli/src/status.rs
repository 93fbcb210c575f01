//! `zklock status` (the holder and the queue of one path) and `zklock ls` (every lock and
//! election under a prefix).

use serde::Serialize;
use zk_recipes::zookeeper_client::Error as ZkError;
use zk_recipes::{NodeFormat, Participant};

use crate::args::{Cli, LsArgs, StatusArgs};
use crate::exit::Failure;
use crate::output::{now_ms, print_json};
use crate::zk::{self, Conn};

#[derive(Serialize)]
pub struct Row {
    pub position: usize,
    pub holder: bool,
    pub id: String,
    pub session: String,
    pub age_ms: i64,
    pub node: String,
    pub fencing_token: i64,
}

#[derive(Serialize)]
struct Status {
    path: String,
    /// `lock`, `election`, `read/write lock`, `semaphore`, or null when nothing is queued here.
    kind: Option<&'static str>,
    /// Nobody holds or waits here, and no lock or election lives under this path.
    free: bool,
    queue: Vec<Row>,
    /// Paths of locks and elections under this one (when nothing is queued at the path itself).
    locks_under: Vec<String>,
    /// The `run --once-per` marker here, if any: the last success, and how long ago.
    once_per: Option<crate::once::Marker>,
}

pub fn rows(queue: Vec<Participant>) -> Vec<Row> {
    let now = now_ms();
    queue
        .into_iter()
        .map(|p| Row {
            position: p.position,
            holder: p.is_holder,
            id: p.id,
            session: format!("{:#x}", p.session),
            age_ms: (now - p.ctime_ms).max(0),
            node: p.node,
            fencing_token: p.czxid,
        })
        .collect()
}

fn age(ms: i64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

/// `zklock status LOCKPATH`: who holds, and who waits, in queue order.
pub async fn show(cli: &Cli, args: &StatusArgs) -> Result<u8, Failure> {
    let (path, format, json) = (args.lockpath.as_str(), cli.format(), args.json);
    let conn = &cli.connect().await?;
    zk_recipes::LockPath::new(path)?;
    let found = zk::queue(conn, path, format).await?;
    let locks_under = match &found {
        Some(_) => Vec::new(),
        None => walk(conn, path, format).await?.into_iter().map(|l| l.path).collect(),
    };
    let (kind, queue) = match found {
        Some((kind, queue)) => (Some(kind.name()), rows(queue)),
        None => (None, Vec::new()),
    };
    let status = Status {
        path: path.to_string(),
        kind,
        free: queue.is_empty() && locks_under.is_empty(),
        queue,
        locks_under,
        once_per: crate::once::marker(conn, path).await?,
    };
    if json {
        return print_json(&status).map(|()| 0);
    }
    if let Some(marker) = &status.once_per {
        println!(
            "{path}: last --once-per success {} ago (clear it: zklock once-per --clear {path})",
            crate::once::age(marker)
        );
    }
    if status.free {
        println!("{path}: free (nobody holds or waits)");
        return Ok(0);
    }
    if status.queue.is_empty() {
        println!("{path}: no lock here, but {} under it (see zklock ls {path}):", status.locks_under.len());
        for under in &status.locks_under {
            println!("  {under}");
        }
        return Ok(0);
    }
    println!("{path}: {}, {} in queue", kind.unwrap_or("lock"), status.queue.len());
    println!("{:<4} {:<6} {:<24} {:<20} {:>8}  NODE", "POS", "HOLDS", "ID", "SESSION", "AGE");
    for r in &status.queue {
        println!(
            "{:<4} {:<6} {:<24} {:<20} {:>8}  {}",
            r.position,
            if r.holder { "yes" } else { "" },
            r.id,
            r.session,
            age(r.age_ms),
            r.node
        );
    }
    Ok(0)
}

/// One lock or election found by [`walk`].
#[derive(Serialize)]
pub struct Listed {
    pub path: String,
    pub kind: &'static str,
    /// Participant ids of the holders (the leader, for an election).
    pub holders: Vec<String>,
    /// How many wait (queued behind the holders).
    pub waiters: usize,
    /// Holders and waiters together: every node in the queue (kept for compatibility; it
    /// counts the holders too).
    pub queue: usize,
    /// How long the oldest holder has held it (by the server's creation time of its node).
    pub age_ms: Option<i64>,
    /// How long ago the last `run --once-per` success was, if it left a marker here.
    pub once_per_age_ms: Option<i64>,
}

/// Whether a child name looks like a queue node of any recipe, in either format: a marker
/// followed by ZooKeeper's sequence suffix.
fn is_queue_node(name: &str) -> bool {
    const MARKERS: [&str; 7] = ["lock-", "latch-", "lease-", "__READ__", "__WRIT__", "__lock__", "__rlock__"];
    MARKERS.iter().any(|m| {
        name.rfind(m).is_some_and(|at| {
            let seq = &name[at + m.len()..];
            let digits = seq.strip_prefix('-').unwrap_or(seq);
            digits.len() == 10 && digits.bytes().all(|b| b.is_ascii_digit())
        })
    })
}

/// Every lock and election at or under `prefix`, depth first, in name order.
pub async fn walk(conn: &Conn, prefix: &str, format: NodeFormat) -> Result<Vec<Listed>, Failure> {
    // `/` is a valid prefix, though not a valid lock path.
    if prefix != "/" {
        zk_recipes::LockPath::new(prefix)?;
    }
    let client = conn.raw()?;
    let mut found = Vec::new();
    let mut stack = vec![prefix.to_string()];
    while let Some(path) = stack.pop() {
        let mut children = match client.list_children(&path).await {
            Ok(children) => children,
            Err(ZkError::NoNode) => continue,
            Err(e) => return Err(zk_recipes::Error::ZooKeeper { op: "list", path, source: e.into() }.into()),
        };
        children.sort();
        let once_per = match children.iter().any(|c| c == crate::once::MARKER) {
            true => crate::once::marker(conn, &path).await?.map(|m| m.age_ms),
            false => None,
        };
        let mut listed = false;
        if children.iter().any(|c| is_queue_node(c)) {
            if let Some((kind, queue)) = zk::queue(conn, &path, format).await? {
                listed = true;
                let now = now_ms();
                let holders: Vec<&Participant> = queue.iter().filter(|p| p.is_holder).collect();
                found.push(Listed {
                    path: path.clone(),
                    kind: kind.name(),
                    age_ms: holders.iter().map(|p| (now - p.ctime_ms).max(0)).max(),
                    holders: holders.iter().map(|p| p.id.clone()).collect(),
                    waiters: queue.len() - holders.len(),
                    queue: queue.len(),
                    once_per_age_ms: once_per,
                });
            }
        }
        if !listed && once_per.is_some() {
            // An idle lock that `run --once-per` ran under: listed for its marker.
            found.push(Listed {
                path: path.clone(),
                kind: "lock",
                holders: Vec::new(),
                waiters: 0,
                queue: 0,
                age_ms: None,
                once_per_age_ms: once_per,
            });
        }
        let base = if path == "/" { String::new() } else { path.clone() };
        for child in children.iter().rev() {
            if is_queue_node(child) || (base.is_empty() && child == "zookeeper") {
                continue;
            }
            stack.push(format!("{base}/{child}"));
        }
    }
    Ok(found)
}

/// `zklock ls PREFIX`: every lock and election under `PREFIX`.
pub async fn ls(cli: &Cli, args: &LsArgs) -> Result<u8, Failure> {
    let (prefix, json) = (args.prefix.as_str(), args.json);
    let found = walk(&cli.connect().await?, prefix, cli.format()).await?;
    if json {
        return print_json(&found).map(|()| 0);
    }
    if found.is_empty() {
        println!("no locks or elections under {prefix}");
        return Ok(0);
    }
    println!(
        "{:<32} {:<16} {:<24} {:>7} {:>7} {:>8} {:>8}",
        "PATH", "KIND", "HOLDER", "HOLDERS", "WAITERS", "AGE", "ONCE-PER"
    );
    for l in &found {
        let holder = if l.holders.is_empty() { "-".to_string() } else { l.holders.join(",") };
        println!(
            "{:<32} {:<16} {:<24} {:>7} {:>7} {:>8} {:>8}",
            l.path,
            l.kind,
            holder,
            l.holders.len(),
            l.waiters,
            l.age_ms.map_or("-".to_string(), age),
            l.once_per_age_ms.map_or("-".to_string(), age)
        );
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::is_queue_node;

    #[test]
    fn queue_nodes_of_every_recipe_and_format_are_recognised() {
        for name in [
            "_c_0f8e9b9e-6c4b-4f0e-9a57-2b7d0a1c3e11-lock-0000000001",
            "_c_0f8e9b9e-6c4b-4f0e-9a57-2b7d0a1c3e11-latch-0000000002",
            "_c_0f8e9b9e-6c4b-4f0e-9a57-2b7d0a1c3e11-w1-lease-0000000003",
            "_c_0f8e9b9e-6c4b-4f0e-9a57-2b7d0a1c3e11-__READ__0000000004",
            "_c_0f8e9b9e-6c4b-4f0e-9a57-2b7d0a1c3e11-__WRIT__0000000005",
            "0f8e9b9e6c4b4f0e9a572b7d0a1c3e11__lock__0000000006",
            "0f8e9b9e6c4b4f0e9a572b7d0a1c3e11__rlock__-2147483648",
        ] {
            assert!(is_queue_node(name), "{name}");
        }
        for name in ["locks", "orders", "lock-", "lock-12", "nightly-lock-report"] {
            assert!(!is_queue_node(name), "{name}");
        }
    }
}
