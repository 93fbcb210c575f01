//! The operator's tools: `break`, `revoke`, and `elect --observe`.

use std::io::{BufRead, Write};

use serde::Serialize;
use zk_recipes::zookeeper_client::Error as ZkError;
use zk_recipes::{NodeFormat, Participant};

use crate::args::{BreakArgs, Cli, RevokeArgs};
use crate::exit::{self, Failure};
use crate::output::print_json;
use crate::zk::{self, Conn};

#[derive(Serialize)]
struct Broken {
    path: String,
    node: String,
    holder: String,
    /// The fencing token of the deleted hold: void from now on.
    fencing_token: i64,
}

/// The node `--node` names (a name under `path`, or its full path), else the only holder.
fn target<'a>(path: &str, queue: &'a [Participant], node: Option<&str>) -> Result<&'a Participant, Failure> {
    if let Some(node) = node {
        let name = node.strip_prefix(path).and_then(|n| n.strip_prefix('/')).unwrap_or(node);
        return queue
            .iter()
            .find(|p| p.node == name)
            .ok_or_else(|| Failure::new(exit::USAGE, format!("{path} has no queue node {name}")));
    }
    let holders: Vec<&Participant> = queue.iter().filter(|p| p.is_holder).collect();
    match holders.as_slice() {
        [one] => Ok(one),
        [] => Err(Failure::new(exit::NOTHING, format!("nobody holds {path}"))),
        many => Err(Failure::new(
            exit::USAGE,
            format!(
                "{path} has {} holders ({}): pick one with --node",
                many.len(),
                many.iter().map(|p| p.node.as_str()).collect::<Vec<_>>().join(", ")
            ),
        )),
    }
}

/// Asks on stderr, reads the answer from stdin: only `y` or `yes` confirm.
fn confirm(question: &str) -> bool {
    // As JSON, the question is a line of its own; as text, the answer follows it.
    if crate::say::json() {
        crate::say::say(crate::say::Level::Warn, &format!("{question} [y/N]"));
    } else {
        eprint!("zklock: {question} [y/N] ");
    }
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer).is_err() {
        return false;
    }
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

/// `zklock break LOCKPATH`: deletes the holder's node (or `--node`'s), once confirmed.
pub async fn break_lock(cli: &Cli, args: &BreakArgs) -> Result<u8, Failure> {
    let (path, format, node, yes, json) =
        (args.lockpath.as_str(), cli.format(), args.node.as_deref(), args.yes, args.json);
    let conn = &cli.connect().await?;
    zk_recipes::LockPath::new(path)?;
    let Some((_, queue)) = zk::queue(conn, path, format).await? else {
        return Err(Failure::new(exit::NOTHING, format!("nobody holds or waits on {path}")));
    };
    let victim = target(path, &queue, node)?;
    let full = format!("{path}/{}", victim.node);
    let question = format!(
        "delete {full}, held by {} (fencing token {})? Its holder may still be running",
        victim.id, victim.czxid
    );
    if !yes && !confirm(&question) {
        return Err(Failure::new(exit::NOTHING, "not confirmed; nothing deleted"));
    }
    match conn.raw()?.delete(&full, None).await {
        Ok(()) => {}
        Err(ZkError::NoNode) => return Err(Failure::new(exit::NOTHING, format!("{full} is already gone"))),
        Err(e) => {
            return Err(zk_recipes::Error::ZooKeeper { op: "delete", path: full, source: e.into() }.into())
        }
    }
    let broken =
        Broken { path: path.to_string(), node: full, holder: victim.id.clone(), fencing_token: victim.czxid };
    if json {
        print_json(&broken)?;
    } else {
        println!(
            "deleted {} (held by {}); fencing token {} is now void",
            broken.node, broken.holder, broken.fencing_token
        );
    }
    Ok(0)
}

#[derive(Serialize)]
struct Asked {
    node: String,
    id: String,
    fencing_token: i64,
}

/// Asks the holder of `node` (any queue node, by name or full path), else every holder of
/// `path`, to release, by setting `__REVOKE__` on its node.
pub async fn revoke(cli: &Cli, args: &RevokeArgs) -> Result<u8, Failure> {
    let (path, format, node, json) = (args.lockpath.as_str(), cli.format(), args.node.as_deref(), args.json);
    let conn = &cli.connect().await?;
    zk_recipes::LockPath::new(path)?;
    let queue = zk::queue(conn, path, format).await?.map(|(_, q)| q).unwrap_or_default();
    let targets: Vec<&Participant> = match node {
        Some(_) => vec![target(path, &queue, node)?],
        None => queue.iter().filter(|p| p.is_holder).collect(),
    };
    let mut asked = Vec::new();
    for holder in targets {
        let full = format!("{path}/{}", holder.node);
        if zk_recipes::request_revocation(conn.session(), &full).await? {
            asked.push(Asked { node: full, id: holder.id.clone(), fencing_token: holder.czxid });
        }
    }
    if asked.is_empty() {
        return Err(Failure::new(exit::NOTHING, format!("nobody holds {path}")));
    }
    if json {
        print_json(&asked)?;
    } else {
        for a in &asked {
            println!("asked {} ({}) to release {path}", a.id, a.node);
        }
    }
    Ok(0)
}

#[derive(Serialize, PartialEq)]
struct Leader {
    path: String,
    leader: Option<String>,
    node: Option<String>,
    fencing_token: Option<u64>,
}

/// Prints the leader of `path`, then every change, until SIGINT or SIGTERM (exit 0). Built on
/// [`zk_recipes::LeaderObserver`]: one watch, on the leader's node (or the children, when nobody
/// leads), across the session's expiries.
pub async fn observe(conn: &Conn, path: &str, format: NodeFormat, json: bool) -> Result<u8, Failure> {
    let io = |e: std::io::Error| Failure::new(exit::UNAVAILABLE, format!("signal handling: {e}"));
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt()).map_err(io)?;
    let mut terminate = signal(SignalKind::terminate()).map_err(io)?;
    let observer = zk_recipes::LeaderObserver::with_format(conn.session(), path, format)?;
    let mut leader = observer.leader();
    let mut last: Option<Leader> = None;
    loop {
        // The first change is the observer's first read (even when nobody leads).
        tokio::select! {
            changed = leader.changed() => if changed.is_err() {
                let closed = format!("stopped observing {path}: the session closed");
                return Err(Failure::new(exit::UNAVAILABLE, closed));
            },
            _ = interrupt.recv() => return Ok(0),
            _ = terminate.recv() => return Ok(0),
        }
        let first = leader.borrow_and_update().clone();
        let now = Leader {
            path: path.to_string(),
            leader: first.as_ref().map(|p| p.id.clone()),
            node: first.as_ref().map(|p| format!("{path}/{}", p.node)),
            fencing_token: first.as_ref().map(|p| p.fencing_token),
        };
        if last.as_ref() == Some(&now) {
            continue;
        }
        if json {
            let line =
                serde_json::to_string(&now).map_err(|e| Failure::new(exit::UNAVAILABLE, e.to_string()))?;
            println!("{line}");
        } else {
            match (&now.leader, &now.node, now.fencing_token) {
                (Some(id), Some(node), Some(token)) => {
                    println!("leader: {id} (node {node}, fencing token {token})")
                }
                _ => println!("no leader"),
            }
        }
        let _ = std::io::stdout().flush();
        last = Some(now);
    }
}
