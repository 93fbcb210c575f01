//! The sale's two stores: the stock in Redis, the orders in PostgreSQL.
//!
//! Fenced (the default), every write goes through the fencing patterns
//! (`examples/fencing`): the token is registered at both stores before anything is read, and
//! each write checks the fence in the statement or script that writes. Unfenced
//! (`--unfenced`), the same writes without a token: only the per-user lock protects them.

use redis::aio::MultiplexedConnection;
use tokio_postgres::Client;

use crate::fencing::postgres::{self as pg, OrderOutcome};
use crate::fencing::redis as rs;
use crate::fencing::{FenceError, StockOutcome};
use crate::report::FinalState;
use crate::{Error, Settings};

/// One process's connections to both stores.
pub struct Stores {
    pg: Client,
    redis: MultiplexedConnection,
    item: String,
    fenced: bool,
}

impl Stores {
    pub async fn connect(settings: &Settings) -> Result<Stores, Error> {
        let pg = pg::connect(&settings.postgres).await?;
        let redis = rs::connect(&settings.redis).await?;
        Ok(Stores { pg, redis, item: settings.item.clone(), fenced: settings.fenced })
    }

    fn redis(&self) -> MultiplexedConnection {
        self.redis.clone()
    }

    /// Installs the schema, clears what an earlier run on the same servers left for this sale
    /// (its orders, its fences, the item's stock) and puts `stock` items on sale.
    pub async fn setup(&self, stock: i64) -> Result<(), Error> {
        pg::install_schema(&self.pg).await?;
        self.pg.execute("DELETE FROM orders WHERE item = $1", &[&self.item]).await.map_err(pg_error)?;
        self.pg
            .execute("DELETE FROM fences WHERE lock_path LIKE '/flash-sale/%'", &[])
            .await
            .map_err(pg_error)?;
        let mut conn = self.redis();
        let keys: Vec<String> = redis::cmd("KEYS").arg("fence:/flash-sale/*").query_async(&mut conn).await?;
        if !keys.is_empty() {
            redis::cmd("DEL").arg(&keys).query_async::<()>(&mut conn).await?;
        }
        rs::set_stock(&mut conn, &self.item, stock).await?;
        Ok(())
    }

    /// Raises the fence of `lock_path` to `token` at both stores (fenced runs only).
    pub async fn register(&self, lock_path: &str, token: i64) -> Result<(), FenceError> {
        if self.fenced {
            pg::register(&self.pg, lock_path, token).await?;
            rs::register(&mut self.redis(), lock_path, token).await?;
        }
        Ok(())
    }

    /// Whether `user` has an order for the item (a plain read: made after registering).
    pub async fn has_order(&self, user: &str) -> Result<bool, Error> {
        let row = self
            .pg
            .query_one("SELECT count(*) FROM orders WHERE user_id = $1 AND item = $2", &[&user, &self.item])
            .await
            .map_err(pg_error)?;
        Ok(row.get::<_, i64>(0) > 0)
    }

    /// Takes one item from the stock.
    pub async fn decrement(&self, lock_path: &str, token: i64) -> Result<StockOutcome, FenceError> {
        let mut conn = self.redis();
        if self.fenced {
            return rs::decrement_stock(&mut conn, lock_path, token, &self.item).await;
        }
        // Unfenced: the same atomic take-one-if-any, with no token to check.
        let left: i64 = redis::Script::new(
            "local n = tonumber(redis.call('GET', KEYS[1]) or '0') \
             if n <= 0 then return -1 end \
             return redis.call('DECR', KEYS[1])",
        )
        .key(rs::stock_key(&self.item))
        .invoke_async(&mut conn)
        .await
        .map_err(FenceError::Redis)?;
        Ok(if left < 0 { StockOutcome::SoldOut } else { StockOutcome::Sold { left } })
    }

    /// Inserts the user's order.
    pub async fn place_order(
        &self,
        lock_path: &str,
        token: i64,
        user: &str,
    ) -> Result<OrderOutcome, FenceError> {
        if self.fenced {
            return pg::place_order(&self.pg, lock_path, token, user, &self.item).await;
        }
        // Unfenced: the app's plain write of the user's order (an upsert: the table keeps one row
        // per user and item); the user's lock and the read before it are all that guard it.
        self.pg
            .execute(
                "INSERT INTO orders (user_id, item, token) VALUES ($1, $2, $3) \
                 ON CONFLICT (user_id, item) DO UPDATE SET token = EXCLUDED.token",
                &[&user, &self.item, &token],
            )
            .await
            .map_err(FenceError::Postgres)?;
        Ok(OrderOutcome::Placed)
    }

    /// What the stores hold after the sale.
    pub async fn final_state(&self) -> Result<FinalState, Error> {
        let stock_left = rs::stock(&mut self.redis(), &self.item).await?;
        let orders: i64 = self
            .pg
            .query_one("SELECT count(*) FROM orders WHERE item = $1", &[&self.item])
            .await
            .map_err(pg_error)?
            .get(0);
        let doubles = self
            .pg
            .query(
                "SELECT user_id, count(*) FROM orders WHERE item = $1 \
                 GROUP BY user_id HAVING count(*) > 1 ORDER BY user_id",
                &[&self.item],
            )
            .await
            .map_err(pg_error)?
            .iter()
            .map(|row| (row.get::<_, String>(0), row.get::<_, i64>(1)))
            .collect();
        let tokens = self
            .pg
            .query("SELECT user_id, token FROM orders WHERE item = $1", &[&self.item])
            .await
            .map_err(pg_error)?
            .iter()
            .map(|row| (row.get::<_, String>(0), row.get::<_, i64>(1)))
            .collect();
        Ok(FinalState { stock_left, orders, doubles, tokens })
    }
}

fn pg_error(e: tokio_postgres::Error) -> Error {
    format!("PostgreSQL: {e}").into()
}
