//! The PostgreSQL pattern: a `fences` table with one row per lock path, and every fenced write
//! one statement whose data-modifying CTE raises (or checks) the fence before the write, so the
//! check and the write commit together.
//!
//! Why one statement is correct under READ COMMITTED: `INSERT ... ON CONFLICT DO UPDATE ...
//! WHERE` locks the fence row and evaluates its `WHERE` on the newest committed version (after
//! waiting for a concurrent writer of the same row), never on an older snapshot. The row stays
//! locked until the statement's transaction commits, so the fenced writes of one lock path are
//! serialized on it, and a write with a token below the fence finds no row in `f` and writes
//! nothing. A plain subquery on `fences` in the write's `WHERE` would read the statement's
//! snapshot instead, which can be stale under concurrency: the pattern never does that.
//!
//! Every statement is sent with [`tokio_postgres::Client::query_typed`]: parse, bind and execute
//! in one round trip, no prepared statement. The success path of a write is that one round
//! trip; only a refusal reads the fence once more, to report the highest token.

use std::time::Duration;

use tokio_postgres::config::Host;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Config, NoTls};

pub use super::StockOutcome;
use super::{FenceError, StaleToken, CONNECT_TIMEOUT};

const RESOURCE: &str = "postgres";

/// The tables: one fence per lock path; a stock counter that never goes below 0; one order per
/// user and item; the sets of the chaos run's lock-set workload. Run under an advisory lock, so
/// that processes installing it at once do not collide.
pub const SCHEMA_SQL: &str = concat!(
    "BEGIN;\n",
    "SELECT pg_advisory_xact_lock(35035);\n",
    "CREATE TABLE IF NOT EXISTS fences (\n",
    "  lock_path text PRIMARY KEY,\n",
    "  token bigint NOT NULL\n",
    ");\n",
    "CREATE TABLE IF NOT EXISTS stock (\n",
    "  item text PRIMARY KEY,\n",
    "  quantity bigint NOT NULL CHECK (quantity >= 0)\n",
    ");\n",
    "CREATE TABLE IF NOT EXISTS orders (\n",
    "  user_id text NOT NULL,\n",
    "  item text NOT NULL,\n",
    "  token bigint NOT NULL,\n",
    "  PRIMARY KEY (user_id, item)\n",
    ");\n",
    "CREATE TABLE IF NOT EXISTS sets (\n",
    "  key text PRIMARY KEY,\n",
    "  elems bigint[] NOT NULL\n",
    ");\n",
    "COMMIT;"
);

/// Raises the fence of lock path `$1` to token `$2`: inserts the row, or raises it when `$2` is
/// at least the fence. A row comes back when the token was accepted, none when it was refused.
pub const REGISTER_SQL: &str = concat!(
    "INSERT INTO fences (lock_path, token) VALUES ($1, $2)\n",
    "ON CONFLICT (lock_path) DO UPDATE SET token = EXCLUDED.token\n",
    "  WHERE fences.token <= EXCLUDED.token\n",
    "RETURNING token"
);

/// The highest token registered for lock path `$1`: read only after a refusal.
pub const HIGHEST_SQL: &str = "SELECT token FROM fences WHERE lock_path = $1";

/// A fenced write of set `$3` to `$4` with token `$2` of lock path `$1`: one row back when it
/// was written, none when the fence refused it.
pub const WRITE_SET_SQL: &str = concat!(
    "WITH f AS (\n",
    "  INSERT INTO fences (lock_path, token) VALUES ($1, $2)\n",
    "  ON CONFLICT (lock_path) DO UPDATE SET token = EXCLUDED.token\n",
    "    WHERE fences.token <= EXCLUDED.token\n",
    "  RETURNING token\n",
    ")\n",
    "INSERT INTO sets (key, elems)\n",
    "SELECT $3, $4 FROM f\n",
    "ON CONFLICT (key) DO UPDATE SET elems = EXCLUDED.elems\n",
    "RETURNING 1"
);

/// A fenced insert of the order of user `$3` for item `$4`, with token `$2` of lock path `$1`.
/// One row back: whether the fence let it through, and whether the order was inserted (false
/// for a user who already has one).
pub const PLACE_ORDER_SQL: &str = concat!(
    "WITH f AS (\n",
    "  INSERT INTO fences (lock_path, token) VALUES ($1, $2)\n",
    "  ON CONFLICT (lock_path) DO UPDATE SET token = EXCLUDED.token\n",
    "    WHERE fences.token <= EXCLUDED.token\n",
    "  RETURNING token\n",
    "), o AS (\n",
    "  INSERT INTO orders (user_id, item, token)\n",
    "  SELECT $3, $4, token FROM f\n",
    "  ON CONFLICT (user_id, item) DO NOTHING\n",
    "  RETURNING 1\n",
    ")\n",
    "SELECT EXISTS (SELECT 1 FROM f) AS fenced, EXISTS (SELECT 1 FROM o) AS placed"
);

/// A fenced decrement of item `$3`'s stock with token `$2` of lock path `$1`: an `UPDATE` whose
/// `WHERE` asks for the fence's row (`EXISTS (SELECT 1 FROM f)`, the CTE's output, not a
/// snapshot read of `fences`) and for stock left. One row back: whether the fence let it
/// through, and what is left (NULL when sold out).
pub const DECREMENT_STOCK_SQL: &str = concat!(
    "WITH f AS (\n",
    "  INSERT INTO fences (lock_path, token) VALUES ($1, $2)\n",
    "  ON CONFLICT (lock_path) DO UPDATE SET token = EXCLUDED.token\n",
    "    WHERE fences.token <= EXCLUDED.token\n",
    "  RETURNING token\n",
    "), s AS (\n",
    "  UPDATE stock SET quantity = quantity - 1\n",
    "  WHERE item = $3 AND quantity > 0 AND EXISTS (SELECT 1 FROM f)\n",
    "  RETURNING quantity\n",
    ")\n",
    "SELECT EXISTS (SELECT 1 FROM f) AS fenced, (SELECT quantity FROM s) AS left_after"
);

/// The unfenced write of a set (what the pattern replaces; for comparison and setup).
pub const WRITE_SET_UNFENCED_SQL: &str = concat!(
    "INSERT INTO sets (key, elems) VALUES ($1, $2)\n",
    "ON CONFLICT (key) DO UPDATE SET elems = EXCLUDED.elems"
);

/// Whether an order was inserted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderOutcome {
    /// The order is in.
    Placed,
    /// The user already had an order for the item: nothing was inserted (not an error).
    AlreadyOrdered,
}

/// Where `config` points: `host:port`, several joined by `,`.
fn describe(config: &Config) -> String {
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match h {
                Host::Tcp(name) => format!("{name}:{port}"),
                Host::Unix(dir) => format!("{}/.s.PGSQL.{port}", dir.display()),
            }
        })
        .collect();
    if hosts.is_empty() {
        "(no host given)".to_string()
    } else {
        hosts.join(",")
    }
}

/// What a connect error says, with its causes (tokio-postgres puts the OS error in the source).
fn reason(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

/// Connects (no TLS) and spawns the connection's task. The wait is bounded: the parameters'
/// `connect_timeout`, or [`CONNECT_TIMEOUT`] when they have none.
///
/// # Errors
/// [`FenceError::Connect`] naming the address (`postgres at 127.0.0.1:5999: ...`) when the
/// parameters cannot be read, the server cannot be reached or refuses the login.
pub async fn connect(params: &str) -> Result<Client, FenceError> {
    let mut config: Config = params.parse().map_err(|e: tokio_postgres::Error| FenceError::Connect {
        resource: RESOURCE,
        addr: format!("{params:?}"),
        reason: format!("cannot read the connection parameters: {}", reason(&e)),
    })?;
    let addr = describe(&config);
    let timeout = *config.get_connect_timeout().unwrap_or(&CONNECT_TIMEOUT);
    config.connect_timeout(timeout);
    let fail = |reason: String| FenceError::Connect { resource: RESOURCE, addr: addr.clone(), reason };
    // The outer bound also covers a server that accepts and then never answers the login.
    let connecting = tokio::time::timeout(timeout + Duration::from_secs(1), config.connect(NoTls));
    let (client, connection) = match connecting.await {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => return Err(fail(reason(&e))),
        Err(_) => return Err(fail(format!("no answer within {timeout:?}"))),
    };
    tokio::spawn(async move {
        // Its end (server gone) shows as an error on the client's next call.
        let _ = connection.await;
    });
    Ok(client)
}

/// Creates the tables ([`SCHEMA_SQL`]) when missing.
///
/// # Errors
/// [`FenceError::Postgres`].
pub async fn install_schema(c: &Client) -> Result<(), FenceError> {
    c.batch_execute(SCHEMA_SQL).await?;
    Ok(())
}

/// The refusal of `token` for `lock_path`, with the highest token now registered.
async fn stale(c: &Client, lock_path: &str, token: i64) -> FenceError {
    let highest = match c.query_typed(HIGHEST_SQL, &[(&lock_path, Type::TEXT)]).await {
        Ok(rows) => rows.first().map(|r| r.get::<_, i64>(0)),
        Err(e) => return FenceError::Postgres(e),
    };
    // No row: an operator cleared the fence after it refused us; the write was refused anyway.
    let highest = highest.unwrap_or(token);
    FenceError::Stale(StaleToken { resource: RESOURCE, lock_path: lock_path.to_string(), token, highest })
}

/// Raises the fence of `lock_path` to `token` (one statement, [`REGISTER_SQL`]). Call it right
/// after taking the lock, BEFORE reading anything the writes depend on.
///
/// # Errors
/// [`FenceError::Stale`] if a higher token is registered (an equal one is accepted);
/// [`FenceError::Postgres`].
pub async fn register(c: &Client, lock_path: &str, token: i64) -> Result<(), FenceError> {
    let rows = c.query_typed(REGISTER_SQL, &[(&lock_path, Type::TEXT), (&token, Type::INT8)]).await?;
    if rows.is_empty() {
        return Err(stale(c, lock_path, token).await);
    }
    Ok(())
}

/// The fence's parameters and the write's own, typed for `query_typed`.
fn params<'a>(
    lock_path: &'a &'a str,
    token: &'a i64,
    rest: &[(&'a (dyn ToSql + Sync), Type)],
) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    let mut all: Vec<(&(dyn ToSql + Sync), Type)> = vec![(lock_path, Type::TEXT), (token, Type::INT8)];
    all.extend(rest.iter().cloned());
    all
}

/// Inserts `user`'s order for `item`, fenced by `token` of `lock_path` (one statement,
/// [`PLACE_ORDER_SQL`]).
///
/// # Errors
/// [`FenceError::Stale`] when the fence refused it (nothing inserted); [`FenceError::Postgres`].
pub async fn place_order(
    c: &Client,
    lock_path: &str,
    token: i64,
    user: &str,
    item: &str,
) -> Result<OrderOutcome, FenceError> {
    let all = params(&lock_path, &token, &[(&user, Type::TEXT), (&item, Type::TEXT)]);
    let row = c.query_typed_one(PLACE_ORDER_SQL, &all).await?;
    let (fenced, placed): (bool, bool) = (row.get(0), row.get(1));
    match (fenced, placed) {
        (false, _) => Err(stale(c, lock_path, token).await),
        (true, true) => Ok(OrderOutcome::Placed),
        (true, false) => Ok(OrderOutcome::AlreadyOrdered),
    }
}

/// Sets `item`'s stock to `n` (setup, unfenced).
///
/// # Errors
/// [`FenceError::Postgres`] (also for a negative `n`: the table's check refuses it).
pub async fn set_stock(c: &Client, item: &str, n: i64) -> Result<(), FenceError> {
    c.query_typed(
        "INSERT INTO stock (item, quantity) VALUES ($1, $2) \
         ON CONFLICT (item) DO UPDATE SET quantity = EXCLUDED.quantity",
        &[(&item, Type::TEXT), (&n, Type::INT8)],
    )
    .await?;
    Ok(())
}

/// Takes one of `item` from the stock, fenced by `token` of `lock_path` (one statement,
/// [`DECREMENT_STOCK_SQL`]); never below 0.
///
/// # Errors
/// [`FenceError::Stale`] when the fence refused it (nothing taken); [`FenceError::Postgres`].
pub async fn decrement_stock(
    c: &Client,
    lock_path: &str,
    token: i64,
    item: &str,
) -> Result<StockOutcome, FenceError> {
    let all = params(&lock_path, &token, &[(&item, Type::TEXT)]);
    let row = c.query_typed_one(DECREMENT_STOCK_SQL, &all).await?;
    let (fenced, left): (bool, Option<i64>) = (row.get(0), row.get(1));
    match (fenced, left) {
        (false, _) => Err(stale(c, lock_path, token).await),
        (true, Some(left)) => Ok(StockOutcome::Sold { left }),
        (true, None) => Ok(StockOutcome::SoldOut),
    }
}

/// `item`'s stock (0 when it has none).
///
/// # Errors
/// [`FenceError::Postgres`].
pub async fn stock(c: &Client, item: &str) -> Result<i64, FenceError> {
    let rows = c.query_typed("SELECT quantity FROM stock WHERE item = $1", &[(&item, Type::TEXT)]).await?;
    Ok(rows.first().map_or(0, |r| r.get(0)))
}

/// The set at `key` (empty when there is none).
///
/// # Errors
/// [`FenceError::Postgres`].
pub async fn read_set(c: &Client, key: &str) -> Result<Vec<i64>, FenceError> {
    let rows = c.query_typed("SELECT elems FROM sets WHERE key = $1", &[(&key, Type::TEXT)]).await?;
    Ok(rows.first().map(|r| r.get(0)).unwrap_or_default())
}

/// Writes the set at `key`, fenced by `token` of `lock_path` (one statement, [`WRITE_SET_SQL`],
/// no extra read on success).
///
/// # Errors
/// [`FenceError::Stale`] when the fence refused it (nothing written); [`FenceError::Postgres`].
pub async fn write_set(
    c: &Client,
    lock_path: &str,
    token: i64,
    key: &str,
    elems: &[i64],
) -> Result<(), FenceError> {
    let all = params(&lock_path, &token, &[(&key, Type::TEXT), (&elems, Type::INT8_ARRAY)]);
    let rows = c.query_typed(WRITE_SET_SQL, &all).await?;
    if rows.is_empty() {
        return Err(stale(c, lock_path, token).await);
    }
    Ok(())
}

/// Writes the set at `key` without a fence ([`WRITE_SET_UNFENCED_SQL`]): what the lock alone
/// gives, for comparison.
///
/// # Errors
/// [`FenceError::Postgres`].
pub async fn write_set_unfenced(c: &Client, key: &str, elems: &[i64]) -> Result<(), FenceError> {
    c.query_typed(WRITE_SET_UNFENCED_SQL, &[(&key, Type::TEXT), (&elems, Type::INT8_ARRAY)]).await?;
    Ok(())
}
