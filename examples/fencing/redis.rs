//! The Redis pattern: one string key per lock path holds its fence (`fence:<lock path>`), and
//! every fenced write is one Lua script that compares the token with the fence, raises it, and
//! writes, in one atomic step (Redis runs a script without interleaving any other command).
//!
//! Lua numbers are doubles: a token above 2^53 would lose precision (2^53 + 1 reads as 2^53), so
//! tokens travel and are stored as 20-digit zero-padded decimal strings and are compared as two
//! 10-digit halves, each exact in a double.
//!
//! Scripts are sent with [`redis::Script`]: `EVALSHA`, one command per write (the script body
//! is sent once, when the server does not know it yet).

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, AsyncConnectionConfig, Script};

pub use super::StockOutcome;
use super::{FenceError, StaleToken, CONNECT_TIMEOUT};

const RESOURCE: &str = "redis";

/// How long a command may wait for its answer before it fails (its outcome then unknown).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// The fence check every script starts with: `KEYS[1]` is the fence, `ARGV[1]` the token.
/// A token below the fence returns `{'stale', fence}`; otherwise the fence is raised to it.
macro_rules! fence_check {
    () => {
        concat!(
            "-- KEYS[1]: the lock path's fence; ARGV[1]: the token, 20 decimal digits.\n",
            "-- Compared as two 10-digit halves, each exact in a Lua number (a double):\n",
            "-- a whole token above 2^53 would lose precision.\n",
            "local function below(a, b)\n",
            "  local ah, bh = tonumber(string.sub(a, 1, 10)), tonumber(string.sub(b, 1, 10))\n",
            "  if ah ~= bh then return ah < bh end\n",
            "  return tonumber(string.sub(a, 11)) < tonumber(string.sub(b, 11))\n",
            "end\n",
            "local token = ARGV[1]\n",
            "if #token ~= 20 or not string.match(token, '^%d+$') then\n",
            "  return redis.error_reply('fencing token must be 20 decimal digits')\n",
            "end\n",
            "local fence = redis.call('GET', KEYS[1])\n",
            "if fence and below(token, fence) then return {'stale', fence} end\n",
            "if fence ~= token then redis.call('SET', KEYS[1], token) end\n",
        )
    };
}

/// Raises the fence `KEYS[1]` to the token `ARGV[1]`, or refuses it.
pub const REGISTER_LUA: &str = concat!(fence_check!(), "return {'ok'}");

/// Fenced: takes one item from the stock `KEYS[2]`, never below 0.
pub const DECREMENT_STOCK_LUA: &str = concat!(
    fence_check!(),
    "local left = tonumber(redis.call('GET', KEYS[2]) or '0')\n",
    "if left <= 0 then return {'soldout'} end\n",
    "return {'sold', tostring(redis.call('DECR', KEYS[2]))}",
);

/// Fenced: sets the set `KEYS[2]` to `ARGV[2]` (its elements, comma-separated).
pub const WRITE_SET_LUA: &str =
    concat!(fence_check!(), "redis.call('SET', KEYS[2], ARGV[2])\n", "return {'ok'}");

static REGISTER: LazyLock<Script> = LazyLock::new(|| Script::new(REGISTER_LUA));
static DECREMENT_STOCK: LazyLock<Script> = LazyLock::new(|| Script::new(DECREMENT_STOCK_LUA));
static WRITE_SET: LazyLock<Script> = LazyLock::new(|| Script::new(WRITE_SET_LUA));

/// The key of `lock_path`'s fence.
pub fn fence_key(lock_path: &str) -> String {
    format!("fence:{lock_path}")
}

/// The key of `item`'s stock counter.
pub fn stock_key(item: &str) -> String {
    format!("stock:{item}")
}

/// A token as the scripts take it: 20 decimal digits, zero-padded, so that string order is
/// number order. (A negative token gives a `-`, which the scripts refuse.)
pub fn token_arg(token: i64) -> String {
    format!("{token:020}")
}

/// Connects, with a bounded connect ([`CONNECT_TIMEOUT`]) and response ([`RESPONSE_TIMEOUT`]) wait.
///
/// # Errors
/// [`FenceError::Connect`] naming the address (`redis at 127.0.0.1:6399: ...`).
pub async fn connect(url: &str) -> Result<MultiplexedConnection, FenceError> {
    let client = redis::Client::open(url).map_err(|e| FenceError::Connect {
        resource: RESOURCE,
        addr: url.to_string(),
        reason: format!("cannot read the URL: {e}"),
    })?;
    let addr = client.get_connection_info().addr().to_string();
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT));
    let connecting = client.get_multiplexed_async_connection_with_config(&config);
    match tokio::time::timeout(CONNECT_TIMEOUT + Duration::from_secs(1), connecting).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(FenceError::Connect { resource: RESOURCE, addr, reason: e.to_string() }),
        Err(_) => Err(FenceError::Connect {
            resource: RESOURCE,
            addr,
            reason: format!("no answer within {CONNECT_TIMEOUT:?}"),
        }),
    }
}

/// A script's answer: `ok`, `stale` with the fence, `sold` with what is left, or `soldout`.
fn stale(reply: &[String], lock_path: &str, token: i64) -> Result<(), FenceError> {
    if reply.first().map(String::as_str) != Some("stale") {
        return Ok(());
    }
    let highest = reply.get(1).and_then(|h| h.parse::<i64>().ok()).unwrap_or(token);
    Err(FenceError::Stale(StaleToken {
        resource: RESOURCE,
        lock_path: lock_path.to_string(),
        token,
        highest,
    }))
}

/// Raises the fence of `lock_path` to `token` (one script, [`REGISTER_LUA`]). Call it right
/// after taking the lock, BEFORE reading anything the writes depend on.
///
/// # Errors
/// [`FenceError::Stale`] if a higher token is registered (an equal one is accepted);
/// [`FenceError::Redis`].
pub async fn register(
    conn: &mut MultiplexedConnection,
    lock_path: &str,
    token: i64,
) -> Result<(), FenceError> {
    let reply: Vec<String> =
        REGISTER.key(fence_key(lock_path)).arg(token_arg(token)).invoke_async(conn).await?;
    stale(&reply, lock_path, token)
}

/// Sets `item`'s stock to `n` (setup, unfenced).
///
/// # Errors
/// [`FenceError::Redis`].
pub async fn set_stock(conn: &mut MultiplexedConnection, item: &str, n: i64) -> Result<(), FenceError> {
    conn.set::<_, _, ()>(stock_key(item), n).await?;
    Ok(())
}

/// Takes one of `item` from the stock, fenced by `token` of `lock_path` (one script,
/// [`DECREMENT_STOCK_LUA`]): [`StockOutcome::SoldOut`] at 0, never below.
///
/// # Errors
/// [`FenceError::Stale`] when the fence refused it (nothing taken); [`FenceError::Redis`].
pub async fn decrement_stock(
    conn: &mut MultiplexedConnection,
    lock_path: &str,
    token: i64,
    item: &str,
) -> Result<StockOutcome, FenceError> {
    let reply: Vec<String> = DECREMENT_STOCK
        .key(fence_key(lock_path))
        .key(stock_key(item))
        .arg(token_arg(token))
        .invoke_async(conn)
        .await?;
    stale(&reply, lock_path, token)?;
    match (reply.first().map(String::as_str), reply.get(1).and_then(|n| n.parse().ok())) {
        (Some("sold"), Some(left)) => Ok(StockOutcome::Sold { left }),
        _ => Ok(StockOutcome::SoldOut),
    }
}

/// `item`'s stock (0 when it has none).
///
/// # Errors
/// [`FenceError::Redis`].
pub async fn stock(conn: &mut MultiplexedConnection, item: &str) -> Result<i64, FenceError> {
    let n: Option<i64> = conn.get(stock_key(item)).await?;
    Ok(n.unwrap_or(0))
}

/// The elements as the set's value holds them: decimal, comma-separated.
fn encode(elems: &[i64]) -> String {
    elems.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

/// The set at `key` (empty when there is none).
///
/// # Errors
/// [`FenceError::Redis`], also for a value that is not a comma-separated list of integers.
pub async fn read_set(conn: &mut MultiplexedConnection, key: &str) -> Result<Vec<i64>, FenceError> {
    let value: Option<String> = conn.get(key).await?;
    let value = value.unwrap_or_default();
    value
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse().map_err(|_| {
                FenceError::Redis(redis::RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "the set's value is not a list of integers",
                    format!("{key}: {value:?}"),
                )))
            })
        })
        .collect()
}

/// Writes the set at `key`, fenced by `token` of `lock_path` (one script, [`WRITE_SET_LUA`]).
///
/// # Errors
/// [`FenceError::Stale`] when the fence refused it (nothing written); [`FenceError::Redis`].
pub async fn write_set(
    conn: &mut MultiplexedConnection,
    lock_path: &str,
    token: i64,
    key: &str,
    elems: &[i64],
) -> Result<(), FenceError> {
    let reply: Vec<String> = WRITE_SET
        .key(fence_key(lock_path))
        .key(key)
        .arg(token_arg(token))
        .arg(encode(elems))
        .invoke_async(conn)
        .await?;
    stale(&reply, lock_path, token)
}

/// Writes the set at `key` without a fence (a plain `SET`): what the lock alone gives.
///
/// # Errors
/// [`FenceError::Redis`].
pub async fn write_set_unfenced(
    conn: &mut MultiplexedConnection,
    key: &str,
    elems: &[i64],
) -> Result<(), FenceError> {
    conn.set::<_, _, ()>(key, encode(elems)).await?;
    Ok(())
}
