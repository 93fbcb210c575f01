//! The resource servers, [`PostgresServer`] and [`RedisServer`]: real processes that answer real
//! queries, on distinct free ports, gone by PID after `stop()` and after a panicking drop.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use common::alive;
use tokio_postgres::NoTls;
use zk_testcluster::{HarnessError, PostgresConfig, PostgresServer, RedisConfig, RedisServer};

/// A guard against hangs, not a speed assertion.
const PATIENCE: Duration = Duration::from_secs(30);

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, fut).await.unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// The parent PID of `pid`, from `/proc/<pid>/stat`.
fn ppid_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.split_whitespace().nth(1)?.parse().ok()
}

/// The live processes whose parent is `pid` (a postmaster's backends and workers).
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| ppid_of(p) == Some(pid) && alive(p))
        .collect()
}

async fn pg_connect(params: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, connection) =
        within("a PostgreSQL connection", tokio_postgres::connect(params, NoTls)).await?;
    tokio::spawn(connection);
    Ok(client)
}

async fn redis_connect(url: &str) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(url)?;
    within("a Redis connection", client.get_multiplexed_async_connection()).await
}

async fn redis_get(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
) -> redis::RedisResult<Option<String>> {
    redis::cmd("GET").arg(key).query_async(conn).await
}

/// Runs `start` on a thread of its own that then panics while holding the server, and returns
/// what `start` reported about the server (taken before the panic).
fn start_then_panic<S, R: Send + 'static>(
    start: impl FnOnce(&tokio::runtime::Runtime) -> (S, R) + Send + 'static,
) -> R {
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let (_server, report) = start(&rt);
        tx.send(report).expect("report");
        panic!("deliberate panic while holding a server (tests/resources.rs)");
    });
    assert!(thread.join().is_err(), "the thread was meant to panic");
    rx.recv().expect("the thread reported its server")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_answers_and_stop_leaves_no_process() {
    let mut pg = PostgresServer::start().await.expect("start PostgreSQL");
    assert_eq!(pg.addr(), SocketAddr::from(([127, 0, 0, 1], pg.port())));
    assert_eq!(
        pg.connect_params(),
        format!("host=127.0.0.1 port={} user=postgres dbname=postgres", pg.port())
    );
    let dir = pg.dir().expect("a directory while running").to_path_buf();

    let client = pg_connect(&pg.connect_params()).await.expect("connect");
    let one: i32 = client.query_one("SELECT 1", &[]).await.expect("SELECT 1").get(0);
    assert_eq!(one, 1);
    let fsync: String = client.query_one("SHOW fsync", &[]).await.expect("SHOW fsync").get(0);
    assert_eq!(fsync, "off");
    // The PID we hold is the postmaster's: our backend is its child.
    let backend: i32 = client.query_one("SELECT pg_backend_pid()", &[]).await.expect("backend pid").get(0);
    assert_eq!(ppid_of(backend as u32), Some(pg.pid()));

    let pid = pg.pid();
    let children = children_of(pid);
    assert!(children.contains(&(backend as u32)), "{children:?}");
    pg.stop();
    assert!(!alive(pid), "the postmaster {pid} outlived stop()");
    let left = children.iter().filter(|&&c| alive(c)).collect::<Vec<_>>();
    assert!(left.is_empty(), "postmaster children left after stop(): {left:?}");
    assert!(!dir.exists(), "{} outlived stop()", dir.display());
    assert!(pg.dir().is_none());

    assert!(client.query_one("SELECT 1", &[]).await.is_err(), "a query on a stopped server succeeded");
    assert!(pg_connect(&pg.connect_params()).await.is_err(), "connected to a stopped server");
    pg.stop(); // idempotent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_postgres_servers_are_separate() {
    let (a, b) = tokio::join!(PostgresServer::start(), PostgresServer::start());
    let (a, b) = (a.expect("start a"), b.expect("start b"));
    assert_ne!(a.port(), b.port());
    assert_ne!(a.pid(), b.pid());
    let (ca, cb) = (
        pg_connect(&a.connect_params()).await.expect("a"),
        pg_connect(&b.connect_params()).await.expect("b"),
    );
    ca.batch_execute("CREATE TABLE only_in_a (x int); INSERT INTO only_in_a VALUES (7)")
        .await
        .expect("create in a");
    let x: i32 = ca.query_one("SELECT x FROM only_in_a", &[]).await.expect("read a").get(0);
    assert_eq!(x, 7);
    let in_b: Option<String> =
        cb.query_one("SELECT to_regclass('only_in_a')::text", &[]).await.expect("look in b").get(0);
    assert_eq!(in_b, None, "b sees a's table");
}

#[test]
fn postgres_dropped_while_panicking_is_stopped() {
    let (pid, children, params) = start_then_panic(|rt| {
        let pg = rt.block_on(PostgresServer::start()).expect("start PostgreSQL");
        let report = (pg.pid(), children_of(pg.pid()), pg.connect_params());
        (pg, report)
    });
    assert!(!children.is_empty(), "a running postmaster has children");
    assert!(!alive(pid), "the postmaster {pid} outlived a panicking drop");
    assert!(children.iter().all(|&c| !alive(c)), "postmaster children outlived a panicking drop");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    assert!(rt.block_on(pg_connect(&params)).is_err(), "connected after a panicking drop");
}

#[tokio::test]
async fn postgres_errors_name_what_is_wrong() {
    let empty = tempfile::tempdir().expect("tempdir");
    let config = PostgresConfig { bin_dir: Some(empty.path().to_path_buf()), ..PostgresConfig::default() };
    match PostgresServer::start_with(config).await {
        Err(e @ HarnessError::NotInstalled { resource: "PostgreSQL", .. }) => {
            assert!(e.to_string().contains("scripts/ensure-resources"), "{e}");
        }
        other => panic!("expected NotInstalled, got {other:?}"),
    }

    let config = PostgresConfig {
        settings: vec![("no_such_setting".into(), "1".into())],
        ..PostgresConfig::default()
    };
    match PostgresServer::start_with(config).await {
        Err(HarnessError::ResourceNotReady { resource: "PostgreSQL", log_tail, .. }) => {
            assert!(log_tail.contains("no_such_setting"), "{log_tail}");
        }
        other => panic!("expected ResourceNotReady, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_answers_and_stop_leaves_no_process() {
    let mut server = RedisServer::start().await.expect("start Redis");
    assert_eq!(server.addr(), SocketAddr::from(([127, 0, 0, 1], server.port())));
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}/", server.port()));
    let dir = server.dir().expect("a directory while running").to_path_buf();

    let mut conn = redis_connect(&server.url()).await.expect("connect");
    let () = redis::cmd("SET").arg("k").arg("v").query_async(&mut conn).await.expect("SET");
    assert_eq!(redis_get(&mut conn, "k").await.expect("GET").as_deref(), Some("v"));
    let save: Vec<String> =
        redis::cmd("CONFIG").arg("GET").arg("save").query_async(&mut conn).await.expect("CONFIG");
    assert_eq!(save, ["save", ""]);

    let pid = server.pid();
    server.stop();
    assert!(!alive(pid), "redis-server {pid} outlived stop()");
    assert!(!dir.exists(), "{} outlived stop()", dir.display());
    assert!(redis_get(&mut conn, "k").await.is_err(), "a GET on a stopped server succeeded");
    assert!(redis_connect(&server.url()).await.is_err(), "connected to a stopped server");
    server.stop(); // idempotent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_redis_servers_are_separate() {
    let (a, b) = tokio::join!(RedisServer::start(), RedisServer::start());
    let (a, b) = (a.expect("start a"), b.expect("start b"));
    assert_ne!(a.port(), b.port());
    assert_ne!(a.pid(), b.pid());
    let mut ca = redis_connect(&a.url()).await.expect("a");
    let mut cb = redis_connect(&b.url()).await.expect("b");
    let () = redis::cmd("SET").arg("only_in_a").arg("1").query_async(&mut ca).await.expect("SET in a");
    assert_eq!(redis_get(&mut ca, "only_in_a").await.expect("GET a").as_deref(), Some("1"));
    assert_eq!(redis_get(&mut cb, "only_in_a").await.expect("GET b"), None, "b sees a's key");
}

#[test]
fn redis_dropped_while_panicking_is_stopped() {
    let (pid, url) = start_then_panic(|rt| {
        let server = rt.block_on(RedisServer::start()).expect("start Redis");
        let report = (server.pid(), server.url());
        (server, report)
    });
    assert!(!alive(pid), "redis-server {pid} outlived a panicking drop");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    assert!(rt.block_on(redis_connect(&url)).is_err(), "connected after a panicking drop");
}

#[tokio::test]
async fn redis_errors_name_what_is_wrong() {
    let config =
        RedisConfig { binary: Some(PathBuf::from("/nonexistent/redis-server")), ..RedisConfig::default() };
    match RedisServer::start_with(config).await {
        Err(e @ HarnessError::NotInstalled { resource: "Redis", .. }) => {
            assert!(e.to_string().contains("scripts/ensure-resources"), "{e}");
        }
        other => panic!("expected NotInstalled, got {other:?}"),
    }

    let config =
        RedisConfig { options: vec![("no-such-option".into(), "1".into())], ..RedisConfig::default() };
    match RedisServer::start_with(config).await {
        Err(HarnessError::ResourceNotReady { resource: "Redis", log_tail, .. }) => {
            assert!(log_tail.contains("no-such-option"), "{log_tail}");
        }
        other => panic!("expected ResourceNotReady, got {other:?}"),
    }
}
