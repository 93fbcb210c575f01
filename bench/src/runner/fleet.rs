//! The fleet scenario's steps: its ensemble, then each fleet through its phases.

use zk_testcluster::ZkCluster;

use super::{server_config, Bench};
use crate::jit;
use crate::peers::{self, FleetPeer, Target};
use crate::plan::Cluster;

/// The fleet runs on the ensemble scenario's ensemble when that ran, or on one of its own (the
/// standalone server's work is done: one cluster at a time).
pub async fn start(b: &mut Bench) -> Result<(), String> {
    if b.ensemble.is_some() {
        return Ok(());
    }
    b.proxy = None;
    b.standalone = None;
    b.ensemble = Some(ZkCluster::start(server_config(3, 384, &b.plan)).await.map_err(|e| e.to_string())?);
    if !b.plan.warms_up() {
        return Ok(());
    }
    // A fresh server compiles for its first minute: load it until its compilers are quiet, as
    // the other scenarios do (the fleet's CPU figures leave out what they compile later).
    let target = Target::direct(b.ensemble.as_ref().ok_or("no ensemble")?);
    let (how, slices) = jit::settle(&target, &b.scratch, || b.path("settle")).await?;
    b.results.settled.push((Cluster::Ensemble, how));
    b.results.warm_rows.extend(slices);
    Ok(())
}

pub async fn fleet(b: &mut Bench, peer: FleetPeer) -> Result<(), String> {
    let prefix = b.path(&format!("fleet-{}", peer.short()));
    let zk = b.ensemble.as_ref().ok_or("no ensemble")?;
    let rows = peers::fleet(zk, peer, &b.plan.fleet, &prefix).await?;
    b.results.fleet.extend(rows);
    Ok(())
}
