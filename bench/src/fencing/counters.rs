//! What the servers counted during a run, on a connection of the bench's own (not a worker's):
//!
//! * ZooKeeper: `zk_packets_received` (`mntr`): one packet per request, a multi included, so it
//!   counts requests, which are round trips. `mntr` itself is not a packet.
//! * PostgreSQL: `pg_stat_statements` calls (the server's count of statements executed, reset
//!   at the start of each run), when the server loaded it; the bench's own queries left out.
//!   PostgreSQL does not count round trips: the kernel does, for the server's sockets
//!   (`data_segs_in` of `ss -ti`, the segments with data the server received: one per request
//!   of a client that sends each request in one write and waits for its answer).
//! * Redis: `INFO stats`: `total_commands_processed` (a Lua script's own `redis.call`s
//!   included) and `total_writes_processed` (writes of replies to clients: one per round trip
//!   of a client that waits for each reply). The bench's own `INFO` is taken off.

use zk_testcluster::ZkCluster;

/// A run's totals, NaN where the server has no such counter.
#[derive(Clone, Copy, Debug)]
pub struct Counts {
    /// Requests (ZooKeeper), statements (PostgreSQL) or commands (Redis) processed.
    pub requests: f64,
    /// Round trips: requests answered (ZooKeeper), replies written (Redis).
    pub round_trips: f64,
}

/// The server's counters, on the bench's own connection.
pub enum Meter<'a> {
    ZooKeeper(&'a ZkCluster),
    /// The server's port, and a client unless `pg_stat_statements` is not loaded.
    Postgres(u16, Option<tokio_postgres::Client>),
    /// The connection, and the server's address (for errors).
    Redis(redis::aio::MultiplexedConnection, String),
}

/// The counters at the start of a run.
pub struct Start(i64, i64);

/// The statements of the bench's own connection, left out of the count.
const OWN: &str = "%pg_stat_statements%";

impl Meter<'_> {
    /// Reads (or, for `pg_stat_statements`, resets) the counters at the start of a run.
    pub async fn start(&mut self) -> Result<Start, String> {
        match self {
            Meter::ZooKeeper(zk) => Ok(Start(packets_received(zk).await?, 0)),
            Meter::Postgres(port, client) => {
                if let Some(client) = client {
                    client.execute("SELECT pg_stat_statements_reset()", &[]).await.map_err(|e| {
                        format!("PostgreSQL at 127.0.0.1:{port}: pg_stat_statements_reset: {e}")
                    })?;
                }
                // After the reset: its request is in, and the bench's connection idle.
                Ok(Start(0, segments_in(*port).await.unwrap_or(-1)))
            }
            Meter::Redis(conn, addr) => {
                let (commands, writes) = redis_stats(conn, addr).await?;
                Ok(Start(commands, writes))
            }
        }
    }

    /// What the server counted since `start`.
    pub async fn since(&mut self, start: Start) -> Result<Counts, String> {
        match self {
            Meter::ZooKeeper(zk) => {
                let requests = (packets_received(zk).await? - start.0) as f64;
                Ok(Counts { requests, round_trips: requests })
            }
            Meter::Postgres(port, client) => {
                // Before the bench's own query.
                let segments = segments_in(*port).await;
                let round_trips = match segments {
                    Some(n) if start.1 >= 0 => (n - start.1) as f64,
                    _ => f64::NAN,
                };
                let Some(client) = client else {
                    return Ok(Counts { requests: f64::NAN, round_trips });
                };
                let row = client
                    .query_one(
                        "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements \
                         WHERE query NOT LIKE $1",
                        &[&OWN],
                    )
                    .await
                    .map_err(|e| format!("PostgreSQL at 127.0.0.1:{port}: pg_stat_statements: {e}"))?;
                let calls: i64 = row.get(0);
                Ok(Counts { requests: calls as f64, round_trips })
            }
            Meter::Redis(conn, addr) => {
                let (commands, writes) = redis_stats(conn, addr).await?;
                // The first INFO is counted in the second's figures (a command is counted, and
                // its reply written, after its reply is made).
                Ok(Counts {
                    requests: (commands - start.0 - 1) as f64,
                    round_trips: (writes - start.1 - 1) as f64,
                })
            }
        }
    }
}

async fn packets_received(zk: &ZkCluster) -> Result<i64, String> {
    Ok(zk.mntr(0).await.map_err(|e| format!("ZooKeeper mntr: {e}"))?.packets_received())
}

/// `total_commands_processed` and `total_writes_processed` of Redis' `INFO stats`.
async fn redis_stats(conn: &mut redis::aio::MultiplexedConnection, addr: &str) -> Result<(i64, i64), String> {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(conn)
        .await
        .map_err(|e| format!("Redis at {addr}: INFO stats: {e}"))?;
    let field = |name: &str| -> Result<i64, String> {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
            .ok_or_else(|| format!("Redis at {addr}: INFO stats has no {name}"))
    };
    Ok((field("total_commands_processed")?, field("total_writes_processed")?))
}

/// The segments with data received by the server's TCP sockets on loopback port `port`, from the
/// kernel (`ss -ti`); `None` when `ss` is missing or says nothing.
async fn segments_in(port: u16) -> Option<i64> {
    let filter = format!("( sport = :{port} )");
    let out = tokio::process::Command::new("ss")
        .args(["-tinH", "state", "established", &filter])
        .kill_on_drop(true)
        .output()
        .await
        .ok()
        .filter(|o| o.status.success())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let counts: Vec<i64> =
        text.split_whitespace().filter_map(|w| w.strip_prefix("data_segs_in:")?.parse().ok()).collect();
    (!counts.is_empty()).then(|| counts.iter().sum())
}
