//! The servers, the proxy and the yardsticks: the steps that start what the scenarios run on,
//! the settling of the servers' JIT, and the raw write loops.

use zk_testcluster::ZkCluster;

use super::{server_config, Bench};
use crate::peers::{self, Target};
use crate::plan::Cluster;
use crate::report::Row;
use crate::rows;
use crate::{jit, NETWORK_ONE_WAY};

pub async fn raw_write(b: &mut Bench) -> Result<(), String> {
    let (p50, row) = rows::raw_write("raw-write", &Target::direct(b.zk()?), &b.plan).await?;
    b.results.raw_p50 = p50;
    b.results.rows.push(Row { packets_per_op: 8.0, ..row });
    Ok(())
}

pub async fn settle(b: &mut Bench, cluster: Cluster) -> Result<(), String> {
    let t = match cluster {
        Cluster::Standalone => Target::direct(b.zk()?),
        Cluster::Ensemble => b.on_follower()?,
    };
    let (how, slices) = jit::settle(&t, &b.scratch, || b.path("settle")).await?;
    b.results.settled.push((cluster, how));
    b.results.warm_rows.extend(slices);
    Ok(())
}

pub fn network_start(b: &mut Bench) -> Result<(), String> {
    let p = b.zk()?.proxy().map_err(|e| e.to_string())?;
    p.set_latency(NETWORK_ONE_WAY);
    b.proxy = Some(p);
    Ok(())
}

pub async fn network_raw_write(b: &mut Bench) -> Result<(), String> {
    let (p50, row) = rows::raw_write("network-raw-write", &b.through_proxy()?, &b.plan).await?;
    b.results.network_raw_p50 = p50;
    b.results.rows.push(row);
    Ok(())
}

pub async fn ensemble_start(b: &mut Bench) -> Result<(), String> {
    b.proxy = None;
    // One cluster at a time: the standalone server's work is done.
    b.standalone = None;
    let ens = ZkCluster::start(server_config(3, 384, &b.plan)).await.map_err(|e| e.to_string())?;
    b.follower = Some(peers::a_follower(&ens).await?);
    b.ensemble = Some(ens);
    Ok(())
}

pub async fn ensemble_raw_write(b: &mut Bench) -> Result<(), String> {
    let (p50, row) = rows::raw_write("ensemble-raw-write", &b.on_follower()?, &b.plan).await?;
    b.results.ensemble_raw_p50 = p50;
    b.results.rows.push(row);
    Ok(())
}
