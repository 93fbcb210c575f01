//! `zklock deadlocks ROOT`: the cycles of sessions that wait for each other in the lock queues
//! under ROOT (`zk_recipes::inspect`). Reads only. Exit 1 when there is one, 0 when none.

use serde::Serialize;
use zk_recipes::inspect::{inspect, Cycle, InspectOptions, Inspection};

use crate::args::{Cli, DeadlocksArgs};
use crate::exit::Failure;
use crate::output::print_json;

/// The exit status when a cycle is found.
pub const FOUND: u8 = 1;

#[derive(Serialize)]
struct Report {
    root: String,
    root_exists: bool,
    deadlocked: bool,
    cycles: Vec<CycleJson>,
    cycles_truncated: bool,
    /// Sessions that can never proceed: in a cycle, or waiting for one.
    stuck_sessions: Vec<String>,
    queues: usize,
    nodes_read: usize,
    truncated: bool,
    skipped: Vec<SkippedJson>,
}

#[derive(Serialize)]
struct CycleJson {
    sessions: Vec<String>,
    paths: Vec<String>,
    steps: Vec<StepJson>,
}

#[derive(Serialize)]
struct StepJson {
    session: String,
    waits_for: String,
    /// Every session of the waiting party (one unless evidence ties several).
    party: Vec<String>,
    /// What ties them.
    evidence: Vec<String>,
    edges: Vec<EdgeJson>,
}

#[derive(Serialize)]
struct EdgeJson {
    waiter_session: String,
    blocker_session: String,
    path: String,
    waiter_node: String,
    waiter_id: String,
    blocker_node: String,
    blocker_id: String,
    blocker_holds: bool,
}

#[derive(Serialize)]
struct SkippedJson {
    path: String,
    reason: String,
}

pub fn session(id: i64) -> String {
    format!("{id:#x}")
}

fn cycle_json(cycle: &Cycle) -> CycleJson {
    CycleJson {
        sessions: cycle.all_sessions().into_iter().map(session).collect(),
        paths: cycle.paths().into_iter().map(String::from).collect(),
        steps: cycle
            .steps
            .iter()
            .map(|s| StepJson {
                session: session(s.session),
                waits_for: session(s.waits_for),
                party: s.party.iter().copied().map(session).collect(),
                evidence: s.evidence.clone(),
                edges: s
                    .edges
                    .iter()
                    .map(|e| EdgeJson {
                        waiter_session: session(e.waiter_session),
                        blocker_session: session(e.blocker_session),
                        path: e.path.clone(),
                        waiter_node: e.waiter_node.clone(),
                        waiter_id: e.waiter_id.clone(),
                        blocker_node: e.blocker_node.clone(),
                        blocker_id: e.blocker_id.clone(),
                        blocker_holds: e.blocker_holds,
                    })
                    .collect(),
            })
            .collect(),
    }
}

fn report(found: &Inspection) -> Report {
    Report {
        root: found.root.clone(),
        root_exists: found.root_exists,
        deadlocked: !found.cycles.is_empty(),
        cycles: found.cycles.iter().map(cycle_json).collect(),
        cycles_truncated: found.cycles_truncated,
        stuck_sessions: found.stuck_sessions.iter().copied().map(session).collect(),
        queues: found.queues.len(),
        nodes_read: found.nodes_read,
        truncated: found.truncated,
        skipped: found
            .skipped
            .iter()
            .map(|s| SkippedJson { path: s.path.clone(), reason: s.reason.clone() })
            .collect(),
    }
}

/// One cycle as text, a line per wait, and one per tie between sessions of one party.
pub fn describe(cycle: &Cycle) -> Vec<String> {
    let mut lines = Vec::new();
    for step in &cycle.steps {
        if step.party.len() > 1 {
            let sessions: Vec<String> = step.party.iter().copied().map(session).collect();
            lines.push(format!("sessions {} are one party:", sessions.join(", ")));
            lines.extend(step.evidence.iter().map(|e| format!("  {e}")));
        }
        for e in &step.edges {
            lines.push(format!(
                "session {} ({}) waits at {} (node {}) behind session {} ({}, {} {})",
                session(e.waiter_session),
                e.waiter_id,
                e.path,
                e.waiter_node,
                session(e.blocker_session),
                e.blocker_id,
                if e.blocker_holds { "holding" } else { "waiting ahead," },
                e.blocker_node,
            ));
        }
    }
    lines
}

/// Notes on what the walk could not see, for stderr.
pub fn notes(found: &Inspection, max_nodes: usize) -> Vec<String> {
    let mut notes = Vec::new();
    if !found.root_exists {
        notes.push(format!("{} does not exist", found.root));
    }
    if found.truncated {
        notes.push(format!(
            "stopped after {} nodes (--max-nodes {max_nodes}): a cycle through the unread part is not seen",
            found.nodes_read
        ));
    }
    if found.cycles_truncated {
        notes.push(format!("more cycles than the {} listed", found.cycles.len()));
    }
    for skipped in &found.skipped {
        notes.push(format!("{} not read as a queue: {}", skipped.path, skipped.reason));
    }
    notes
}

pub async fn deadlocks(cli: &Cli, args: &DeadlocksArgs) -> Result<u8, Failure> {
    let conn = &cli.connect().await?;
    let options = InspectOptions::new().max_nodes(args.max_nodes);
    let found = inspect(conn.session(), &args.root, &options).await?;
    let code = if found.cycles.is_empty() { 0 } else { FOUND };
    for note in notes(&found, args.max_nodes) {
        crate::say::say(crate::say::Level::Warn, &format!("note: {note}"));
    }
    if args.json {
        print_json(&report(&found))?;
        return Ok(code);
    }
    let summary = format!("{} queues, {} nodes read", found.queues.len(), found.nodes_read);
    if found.cycles.is_empty() {
        println!("{}: no deadlock ({summary})", found.root);
        return Ok(code);
    }
    println!(
        "{}: {} deadlocked session(s) in {} cycle(s) ({summary})",
        found.root,
        found.stuck_sessions.len(),
        found.cycles.len()
    );
    for (n, cycle) in found.cycles.iter().enumerate() {
        println!("cycle {} of {}: {}", n + 1, found.cycles.len(), cycle.paths().join(", "));
        for line in describe(cycle) {
            println!("  {line}");
        }
    }
    println!(
        "Each waits for the next; none proceeds until one gives up, is stopped, or its session expires."
    );
    Ok(code)
}
