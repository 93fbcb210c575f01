//! The scenarios beyond the mutex's cycles: the other recipes, leader failover, queues at scale,
//! and fencing (with its PostgreSQL and Redis servers).

use std::time::Duration;

use super::{Bench, Measure};
use crate::fencing::{self, Resource};
use crate::peers::{self, Peer, Recipe, Target};
use crate::plan::Run;
use crate::rows::{failover_scenario, recipe_row};

pub async fn recipe(b: &mut Bench, recipe: Recipe, peer: Peer, m: Measure) -> Result<(), String> {
    let n = b.plan.contenders(recipe);
    let path = b.path(recipe.scenario());
    let t = Target::direct(b.zk()?);
    let c = peers::contend_on(&t, peer, recipe, n, m.secs, &path, &b.scratch).await?;
    b.results.rows.push(recipe_row(recipe, peer, n, m.repeat, c));
    Ok(())
}

/// A failover run: `who` is the peer and its session timeout.
pub async fn failover(
    b: &mut Bench,
    run: Run,
    recipe: Recipe,
    who: (Peer, Duration),
    m: Measure,
) -> Result<(), String> {
    let (peer, session) = who;
    let kills = b.plan.kills_of(run);
    let scenario = failover_scenario(recipe);
    let path = b.path(scenario);
    let split = peers::failover(b.zk()?, (peer, b.plan.beat_period), recipe, kills, session, &path).await?;
    b.results.rows.push(peers::failover_row(scenario, peer, session, m.repeat, split));
    Ok(())
}

pub async fn scale(b: &mut Bench, n: usize, procs: usize, peer: Peer, m: Measure) -> Result<(), String> {
    let path = b.path(peers::scale_scenario(procs));
    let s = peers::scale(b.zk()?, peer, n, procs, &path).await?;
    b.results.rows.push(s.row(peer, n, procs, m.repeat));
    Ok(())
}

pub async fn fencing_start(b: &mut Bench) -> Result<(), String> {
    b.fencing_servers = Some(fencing::Servers::start(b.plan.skip_missing).await?);
    Ok(())
}

pub async fn fencing(b: &mut Bench, resource: Resource, workers: usize, m: Measure) -> Result<(), String> {
    let root = b.path(&format!("fencing-{}", resource.short()));
    let servers = b.fencing_servers.as_ref().ok_or("no fencing servers")?;
    let samples = fencing::run(b.zk()?, servers, resource, workers, m.repeat, m.secs, &root).await?;
    b.results.fenced.extend(samples);
    Ok(())
}
