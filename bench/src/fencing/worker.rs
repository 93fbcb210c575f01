//! One worker of the fencing scenario: its own ZooKeeper session holding its own lock, its own
//! connection to the resource, and the two writes compared: fenced and unfenced.

use std::time::Duration;

use zk_recipes::zookeeper_client::{Acls, Client, CreateMode};
use zk_recipes::LockGuard;

use super::patterns::{postgres, redis as fenced_redis};
use super::{Resource, Servers, Variant};
use crate::ours;

/// The session timeout of a worker's ZooKeeper session.
const SESSION: Duration = Duration::from_secs(20);
/// How many elements each write's set holds.
const ELEMS: i64 = 4;

/// A worker's connection to the resource written.
enum Conn {
    /// The session's own client: the unfenced write is a plain `set_data` on it.
    ZooKeeper(Client),
    Postgres(tokio_postgres::Client),
    Redis(redis::aio::MultiplexedConnection),
}

/// A worker: a lock held on its own path, its token registered at the resource, and a key of
/// its own to write.
pub struct Worker {
    guard: LockGuard,
    /// Keeps the session open while the guard is held.
    session: ours::Handle,
    lock_path: String,
    token: i64,
    /// The ZooKeeper node (`ZooKeeper`) or the set's key (PostgreSQL, Redis) written.
    key: String,
    conn: Conn,
}

impl Worker {
    /// Connects a session to `zk`, takes the lock at `lock_path`, connects to `resource` and
    /// registers the lock's token there (for ZooKeeper: creates the node `key` instead).
    pub async fn start(
        zk: &str,
        servers: &Servers,
        resource: Resource,
        lock_path: String,
        key: String,
    ) -> Result<Worker, String> {
        let session = ours::connect(zk, SESSION).await?;
        let guard = ours::mutex(&session, &lock_path)?
            .acquire()
            .await
            .map_err(|e| format!("lock {lock_path}: {e}"))?;
        let token = guard.fencing_token_i64();
        let conn = match resource {
            Resource::ZooKeeper => {
                let client = session.client().map_err(|e| e.to_string())?;
                let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
                client
                    .create(&key, &[], &options)
                    .await
                    .map_err(|e| format!("ZooKeeper create {key}: {e}"))?;
                Conn::ZooKeeper(client)
            }
            Resource::Postgres => {
                let client =
                    postgres::connect(&servers.postgres_params()?).await.map_err(|e| e.to_string())?;
                postgres::register(&client, &lock_path, token).await.map_err(|e| e.to_string())?;
                Conn::Postgres(client)
            }
            Resource::Redis => {
                let mut conn =
                    fenced_redis::connect(&servers.redis_url()?).await.map_err(|e| e.to_string())?;
                fenced_redis::register(&mut conn, &lock_path, token).await.map_err(|e| e.to_string())?;
                Conn::Redis(conn)
            }
        };
        Ok(Worker { guard, session, lock_path, token, key, conn })
    }

    /// One write of the `i`-th value: a set of [`ELEMS`] numbers from `i` (ZooKeeper: their
    /// bytes as the node's data), fenced or not.
    pub async fn write(&mut self, variant: Variant, i: i64) -> Result<(), String> {
        let elems: Vec<i64> = (i..i + ELEMS).collect();
        let (lock, token, key) = (self.lock_path.as_str(), self.token, self.key.as_str());
        let name = self.name();
        let failed = |e: &dyn std::fmt::Display| format!("{name} {variant:?} write of {key}: {e}");
        match (&mut self.conn, variant) {
            (Conn::ZooKeeper(_), Variant::Fenced) => {
                let data: Vec<u8> = elems.iter().flat_map(|e| e.to_be_bytes()).collect();
                let mut write = self.guard.fenced_writer().map_err(|e| failed(&e))?;
                write.add_set_data(key, &data, None).map_err(|e| failed(&e))?;
                write.commit().await.map(drop).map_err(|e| failed(&e))
            }
            (Conn::ZooKeeper(client), Variant::Unfenced) => {
                let data: Vec<u8> = elems.iter().flat_map(|e| e.to_be_bytes()).collect();
                client.set_data(key, &data, None).await.map(drop).map_err(|e| failed(&e))
            }
            (Conn::Postgres(c), Variant::Fenced) => {
                postgres::write_set(c, lock, token, key, &elems).await.map_err(|e| failed(&e))
            }
            (Conn::Postgres(c), Variant::Unfenced) => {
                postgres::write_set_unfenced(c, key, &elems).await.map_err(|e| failed(&e))
            }
            (Conn::Redis(c), Variant::Fenced) => {
                fenced_redis::write_set(c, lock, token, key, &elems).await.map_err(|e| failed(&e))
            }
            (Conn::Redis(c), Variant::Unfenced) => {
                fenced_redis::write_set_unfenced(c, key, &elems).await.map_err(|e| failed(&e))
            }
        }
    }

    fn name(&self) -> &'static str {
        match self.conn {
            Conn::ZooKeeper(_) => Resource::ZooKeeper.name(),
            Conn::Postgres(_) => Resource::Postgres.name(),
            Conn::Redis(_) => Resource::Redis.name(),
        }
    }

    /// Releases the lock and closes the session and the connection.
    pub async fn finish(self) -> Result<(), String> {
        let Worker { guard, session, lock_path, conn, .. } = self;
        drop(conn);
        guard.release().await.map_err(|e| format!("release {lock_path}: {e}"))?;
        session.close().await;
        Ok(())
    }
}
