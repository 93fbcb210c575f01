//! `zklock status`: the holder and the queue.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use zk_recipes::zookeeper_client::Client;
use zk_recipes::{
    InterProcessMutex, InterProcessReadWriteLock, LatchOptions, LeaderLatch, LockOptions, NodeFormat,
    Participant,
};

use crate::exit::{self, Failure};

#[derive(Serialize)]
struct Row {
    position: usize,
    holder: bool,
    id: String,
    session: String,
    age_ms: i64,
    node: String,
    fencing_token: i64,
}

/// The queue under `path`, read as a mutex, else a latch, else a read/write lock (whichever
/// kind of node is there), in `format` names and then in the other format's.
async fn queue(
    client: Client,
    path: &str,
    format: NodeFormat,
) -> Result<(&'static str, Vec<Participant>), Failure> {
    let other = if format == NodeFormat::Kazoo { NodeFormat::Curator } else { NodeFormat::Kazoo };
    for format in [format, other] {
        let lock = LockOptions::new().format(format);
        let mutex =
            InterProcessMutex::with_options(client.clone(), path, lock.clone())?.participants().await?;
        if !mutex.is_empty() {
            return Ok(("lock", mutex));
        }
        let latch = LeaderLatch::with_options(
            client.clone(),
            path,
            "zklock-status",
            LatchOptions::new().format(format),
        )?;
        let latch = latch.participants().await?;
        if !latch.is_empty() {
            return Ok(("election", latch));
        }
        let rw = InterProcessReadWriteLock::with_options(client.clone(), path, lock)?.participants().await?;
        if !rw.is_empty() {
            return Ok(("read/write lock", rw));
        }
    }
    Ok(("lock", Vec::new()))
}

pub async fn show(client: Client, path: &str, format: NodeFormat, json: bool) -> Result<(), Failure> {
    let (kind, queue) = queue(client, path, format).await?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
    let rows: Vec<Row> = queue
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
        .collect();
    if json {
        let text = serde_json::to_string_pretty(&rows)
            .map_err(|e| Failure::new(exit::UNAVAILABLE, e.to_string()))?;
        println!("{text}");
        return Ok(());
    }
    if rows.is_empty() {
        println!("{path}: free (nobody holds or waits)");
        return Ok(());
    }
    println!("{path}: {kind}, {} in queue", rows.len());
    println!("{:<4} {:<6} {:<24} {:<20} {:>8}  NODE", "POS", "HOLDS", "ID", "SESSION", "AGE");
    for r in rows {
        let age = format!("{:.1}s", r.age_ms as f64 / 1000.0);
        println!(
            "{:<4} {:<6} {:<24} {:<20} {:>8}  {}",
            r.position,
            if r.holder { "yes" } else { "" },
            r.id,
            r.session,
            age,
            r.node
        );
    }
    Ok(())
}
