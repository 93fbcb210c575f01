//! The `lockset` phase's resources, on the orchestrator's side: one PostgreSQL and one Redis
//! server for the run (started by the harness on free ports, stopped by PID at the end, and on
//! drop when the run fails), each set emptied before the phase and read once the workers are
//! gone.

use std::collections::BTreeMap;
use std::time::Duration;

use zk_recipes::zookeeper_client::CreateMode;
use zk_testcluster::{PostgresServer, RedisServer};

use crate::fencing;
use crate::lockset::{decode, Store, VARIANTS};
use crate::Error;

/// The run's PostgreSQL and Redis.
pub struct Servers {
    pub pg: PostgresServer,
    pub redis: RedisServer,
}

impl Servers {
    /// Starts both, with the patterns' schema installed.
    pub async fn start() -> Result<Servers, Error> {
        let pg = PostgresServer::start().await?;
        let redis = RedisServer::start().await?;
        let client = fencing::postgres::connect(&pg.connect_params()).await?;
        fencing::postgres::install_schema(&client).await?;
        eprintln!(
            "  lockset resources: PostgreSQL {} (pid {}), Redis {} (pid {})",
            pg.addr(),
            pg.pid(),
            redis.addr(),
            redis.pid()
        );
        Ok(Servers { pg, redis })
    }

    /// What a worker process needs to reach them.
    pub fn args(&self) -> Vec<String> {
        vec!["--pg".into(), self.pg.connect_params(), "--redis".into(), self.redis.url()]
    }

    /// Stops both by PID.
    pub fn stop(&mut self) {
        self.pg.stop();
        self.redis.stop();
    }
}

/// Empties every variant's set (ZooKeeper: creates its znode, empty).
pub async fn reset(servers: &Servers, zk_connect: &str) -> Result<(), Error> {
    let pg = fencing::postgres::connect(&servers.pg.connect_params()).await?;
    let mut redis = fencing::redis::connect(&servers.redis.url()).await?;
    let session = crate::sasl::connect(zk_connect, Duration::from_secs(10)).await?;
    let zk = session.client()?;
    let persistent = CreateMode::Persistent.with_acls(crate::sasl::node_acls());
    for v in VARIANTS {
        match v.store {
            Store::Zk => {
                if zk.check_stat(&v.key()).await?.is_some() {
                    zk.set_data(&v.key(), &[], None).await?;
                } else {
                    let parent = v.key().rsplit_once('/').map(|(p, _)| p.to_string()).unwrap_or_default();
                    zk.mkdir(&parent, &persistent).await?;
                    zk.create(&v.key(), &[], &persistent).await?;
                }
            }
            Store::Postgres => fencing::postgres::write_set_unfenced(&pg, &v.key(), &[]).await?,
            Store::Redis => fencing::redis::write_set_unfenced(&mut redis, &v.key(), &[]).await?,
        }
    }
    session.close().await;
    Ok(())
}

/// Every variant's set, read once the workers are gone: variant → elements.
pub async fn final_reads(servers: &Servers, zk_connect: &str) -> Result<BTreeMap<String, Vec<i64>>, Error> {
    let pg = fencing::postgres::connect(&servers.pg.connect_params()).await?;
    let mut redis = fencing::redis::connect(&servers.redis.url()).await?;
    let session = crate::sasl::connect(zk_connect, Duration::from_secs(10)).await?;
    let zk = session.client()?;
    let mut out = BTreeMap::new();
    for v in VARIANTS {
        let set = match v.store {
            Store::Zk => decode(&zk.get_data(&v.key()).await?.0),
            Store::Postgres => fencing::postgres::read_set(&pg, &v.key()).await?,
            Store::Redis => fencing::redis::read_set(&mut redis, &v.key()).await?,
        };
        out.insert(v.name.to_string(), set);
    }
    session.close().await;
    Ok(out)
}
