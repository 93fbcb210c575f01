//! The `fencing` scenario: what a fenced write costs against an unfenced one, at each resource a
//! lock holder writes to.
//!
//! * ZooKeeper: [`zk_recipes::FencedWriter`] (a check of the lock node and a `set_data` in one
//!   multi) against a plain `set_data`.
//! * PostgreSQL and Redis: the patterns of `examples/fencing` (the fence checked in the same
//!   statement, or the same Lua script, that writes) against their unfenced writes.
//!
//! With 1 worker and with 8, each on its own session and connection, holding its own lock (so
//! its token is a real one, registered at the resource) and writing a key of its own. Each run
//! reports p50 latency, throughput, and what the server counted per write (see [`counters`]):
//! the fenced write must stay one round trip, with no extra read.

use zk_testcluster::{HarnessError, PostgresConfig, PostgresServer, RedisServer, ZkCluster};

mod counters;
#[path = "../../examples/fencing/mod.rs"]
mod patterns;
mod table;
mod worker;

use crate::clock::now_ns;
use crate::stats;
use counters::Meter;
pub use table::{problems, summary, write_csv, Sample};
use worker::Worker;

/// The worker counts of the scenario's runs.
pub const WORKERS: [usize; 2] = [1, 8];

/// Writes each worker makes, fenced and unfenced, before a measured run: connections, statement
/// plans, the Lua script's cache, and the keys' rows and nodes are warm.
const WARMUP_WRITES: i64 = 20;

/// The slices of each variant's run (see [`run`]).
const SLICES: usize = 8;

/// A resource written under a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Resource {
    ZooKeeper,
    Postgres,
    Redis,
}

impl Resource {
    /// In the report's order.
    pub const ALL: [Resource; 3] = [Resource::ZooKeeper, Resource::Postgres, Resource::Redis];

    pub fn name(self) -> &'static str {
        match self {
            Resource::ZooKeeper => "ZooKeeper",
            Resource::Postgres => "PostgreSQL",
            Resource::Redis => "Redis",
        }
    }

    pub fn short(self) -> &'static str {
        match self {
            Resource::ZooKeeper => "zookeeper",
            Resource::Postgres => "postgres",
            Resource::Redis => "redis",
        }
    }
}

/// The two writes compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    Unfenced,
    Fenced,
}

impl Variant {
    pub fn short(self) -> &'static str {
        match self {
            Variant::Unfenced => "unfenced",
            Variant::Fenced => "fenced",
        }
    }
}

/// The PostgreSQL and Redis servers of the scenario (ZooKeeper is the bench's standalone one).
pub struct Servers {
    postgres: Option<PostgresServer>,
    redis: Option<RedisServer>,
    /// `pg_stat_statements` is loaded, and its extension created.
    statements: bool,
    /// The resources left out (`--skip-missing`), each with why.
    pub missing: Vec<(Resource, String)>,
}

impl Servers {
    /// Starts a PostgreSQL server (with `pg_stat_statements`, when it loads) with the patterns'
    /// schema, and a Redis server. A server that cannot start is an error naming it, or, with
    /// `skip_missing`, left out and named in [`Servers::missing`].
    pub async fn start(skip_missing: bool) -> Result<Servers, String> {
        let mut missing = Vec::new();
        let mut left_out = |r: Resource, why: String| -> Result<(), String> {
            if skip_missing {
                eprintln!("zk-bench: fencing: skipping {}: {why}", r.name());
                missing.push((r, why));
                Ok(())
            } else {
                Err(format!("fencing: {why} (or pass --skip-missing)"))
            }
        };
        let (postgres, statements) = match start_postgres().await {
            Ok((pg, statements)) => (Some(pg), statements),
            Err(why) => {
                left_out(Resource::Postgres, why)?;
                (None, false)
            }
        };
        let redis = match RedisServer::start().await {
            Ok(r) => Some(r),
            Err(e) => {
                left_out(Resource::Redis, e.to_string())?;
                None
            }
        };
        Ok(Servers { postgres, redis, statements, missing })
    }

    fn has(&self, r: Resource) -> bool {
        match r {
            Resource::ZooKeeper => true,
            Resource::Postgres => self.postgres.is_some(),
            Resource::Redis => self.redis.is_some(),
        }
    }

    fn postgres_params(&self) -> Result<String, String> {
        self.postgres.as_ref().map(PostgresServer::connect_params).ok_or_else(|| "no PostgreSQL".into())
    }

    fn redis_url(&self) -> Result<String, String> {
        self.redis.as_ref().map(RedisServer::url).ok_or_else(|| "no Redis".into())
    }

    /// The bench's own connection to `r`'s counters.
    async fn meter<'a>(&self, zk: &'a ZkCluster, r: Resource) -> Result<Meter<'a>, String> {
        Ok(match r {
            Resource::ZooKeeper => Meter::ZooKeeper(zk),
            Resource::Postgres => {
                let pg = self.postgres.as_ref().ok_or("no PostgreSQL")?;
                let client = if self.statements {
                    Some(patterns::postgres::connect(&pg.connect_params()).await.map_err(|e| e.to_string())?)
                } else {
                    None
                };
                Meter::Postgres(pg.port(), client)
            }
            Resource::Redis => {
                let redis = self.redis.as_ref().ok_or("no Redis")?;
                let conn = patterns::redis::connect(&redis.url()).await.map_err(|e| e.to_string())?;
                Meter::Redis(conn, redis.addr().to_string())
            }
        })
    }
}

/// A PostgreSQL server with the patterns' schema; `true` when `pg_stat_statements` counts.
async fn start_postgres() -> Result<(PostgresServer, bool), String> {
    let with_statements = PostgresConfig {
        settings: vec![("shared_preload_libraries".into(), "pg_stat_statements".into())],
        ..PostgresConfig::default()
    };
    let (pg, loaded) = match PostgresServer::start_with(with_statements).await {
        Ok(pg) => (pg, true),
        Err(e @ HarnessError::NotInstalled { .. }) => return Err(e.to_string()),
        Err(e) => {
            eprintln!("zk-bench: fencing: PostgreSQL without pg_stat_statements ({e})");
            (PostgresServer::start().await.map_err(|e| e.to_string())?, false)
        }
    };
    let client = patterns::postgres::connect(&pg.connect_params()).await.map_err(|e| e.to_string())?;
    patterns::postgres::install_schema(&client).await.map_err(|e| e.to_string())?;
    let statements = loaded
        && match client.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements").await {
            Ok(()) => true,
            Err(e) => {
                eprintln!("zk-bench: fencing: no pg_stat_statements at {}: {e}", pg.addr());
                false
            }
        };
    Ok((pg, statements))
}

/// The runs of `resource` with `workers` workers, fenced and unfenced, `secs` each, in
/// [`SLICES`] slices taken in turn (ABBA: unfenced, fenced, fenced, unfenced, ...), so that a
/// change in the machine's load falls on both alike; locks under `root`. No samples when the
/// resource is left out.
pub async fn run(
    zk: &ZkCluster,
    servers: &Servers,
    resource: Resource,
    workers: usize,
    repeat: usize,
    secs: f64,
    root: &str,
) -> Result<Vec<Sample>, String> {
    if !servers.has(resource) {
        return Ok(Vec::new());
    }
    let mut crew = Vec::with_capacity(workers);
    for w in 0..workers {
        let lock = format!("{root}/lock-{w}");
        crew.push(
            Worker::start(&zk.connect_string(), servers, resource, lock, format!("{root}/data-{w}")).await?,
        );
    }
    for variant in [Variant::Unfenced, Variant::Fenced] {
        for w in crew.iter_mut() {
            for i in 0..WARMUP_WRITES {
                w.write(variant, i).await?;
            }
        }
    }
    let mut meter = servers.meter(zk, resource).await?;
    // Per variant: latencies, seconds, requests, round trips.
    let mut totals = [(Vec::new(), 0.0, 0.0, 0.0), (Vec::new(), 0.0, 0.0, 0.0)];
    for slice in 0..SLICES {
        let mut order = [Variant::Unfenced, Variant::Fenced];
        if (slice + repeat) % 2 == 1 {
            order.reverse();
        }
        for variant in order {
            let start = meter.start().await?;
            let (back, latencies, elapsed) = measure(crew, variant, secs / SLICES as f64).await?;
            crew = back;
            let counts = meter.since(start).await?;
            let total = &mut totals[variant as usize];
            total.0.extend(latencies);
            total.1 += elapsed;
            total.2 += counts.requests;
            total.3 += counts.round_trips;
        }
    }
    let mut samples = Vec::new();
    for (variant, (mut latencies, elapsed, requests, round_trips)) in
        [Variant::Unfenced, Variant::Fenced].into_iter().zip(totals)
    {
        let writes = latencies.len() as u64;
        let per_write = |x: f64| x / writes.max(1) as f64;
        samples.push(Sample {
            resource,
            workers,
            variant,
            repeat,
            writes,
            secs: elapsed,
            p50_us: stats::percentile(&mut latencies, 50.0) as f64 / 1000.0,
            p99_us: stats::percentile(&mut latencies, 99.0) as f64 / 1000.0,
            requests_per_write: per_write(requests),
            round_trips_per_write: per_write(round_trips),
        });
    }
    for w in crew {
        w.finish().await?;
    }
    Ok(samples)
}

/// Every worker writing `variant` back to back for `secs`, each in its own task: the workers
/// back, every write's latency (ns), and the seconds from the start until the last one ended.
async fn measure(
    crew: Vec<Worker>,
    variant: Variant,
    secs: f64,
) -> Result<(Vec<Worker>, Vec<u64>, f64), String> {
    let start = now_ns();
    let deadline = start + (secs * 1e9) as u64;
    let tasks: Vec<_> = crew
        .into_iter()
        .map(|mut w| {
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut i = WARMUP_WRITES;
                loop {
                    let t = now_ns();
                    if t >= deadline {
                        return Ok::<_, String>((w, latencies));
                    }
                    w.write(variant, i).await?;
                    latencies.push(now_ns() - t);
                    i += 1;
                }
            })
        })
        .collect();
    let mut crew = Vec::new();
    let mut all = Vec::new();
    let mut failed = None;
    for task in tasks {
        match task.await {
            Ok(Ok((w, latencies))) => {
                crew.push(w);
                all.extend(latencies);
            }
            Ok(Err(e)) => failed = failed.or(Some(e)),
            Err(e) => failed = failed.or(Some(format!("a fencing worker failed: {e}"))),
        }
    }
    let elapsed = (now_ns() - start) as f64 / 1e9;
    match failed {
        Some(e) => Err(e),
        None => Ok((crew, all, elapsed)),
    }
}
