//! The PostgreSQL fencing pattern (`examples/fencing/postgres.rs`, `docs/fencing.md`) against a
//! real PostgreSQL 15 server (and a real ZooKeeper where a lock is involved).

mod common;
#[path = "../examples/fencing/mod.rs"]
mod fencing;
#[path = "common/fencing.rs"]
mod shared;

use std::sync::Arc;

use common::*;
use fencing::postgres::{self as pg, OrderOutcome};
use fencing::{FenceError, StockOutcome};
use tokio_postgres::types::Type;
use tokio_postgres::Client;
use zk_recipes::InterProcessMutex;
use zk_testcluster::{PostgresConfig, PostgresServer};

async fn server() -> PostgresServer {
    shared::started("PostgreSQL", PostgresServer::start()).await
}

async fn connected(server: &PostgresServer) -> Client {
    let c = pg::connect(&server.connect_params()).await.expect("connect to PostgreSQL");
    pg::install_schema(&c).await.expect("install the schema");
    c
}

/// The refusal `r` must be: stale, for `token`, with `highest`.
#[track_caller]
fn assert_stale<T: std::fmt::Debug>(r: Result<T, FenceError>, lock_path: &str, token: i64, highest: i64) {
    shared::assert_stale("postgres", r, lock_path, token, highest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepts_the_current_token_refuses_an_older_one_and_an_equal_one_passes() {
    let server = server().await;
    let c = connected(&server).await;
    let lock = "/locks/sale";
    pg::register(&c, lock, 10).await.unwrap();
    pg::write_set(&c, lock, 10, "s", &[1]).await.unwrap();
    pg::set_stock(&c, "widget", 3).await.unwrap();
    // A newer holder registers: the older token is refused everywhere, nothing is written.
    pg::register(&c, lock, 20).await.unwrap();
    assert_stale(pg::write_set(&c, lock, 10, "s", &[1, 2]).await, lock, 10, 20);
    assert_stale(pg::place_order(&c, lock, 10, "alice", "widget").await, lock, 10, 20);
    assert_stale(pg::decrement_stock(&c, lock, 10, "widget").await, lock, 10, 20);
    assert_stale(pg::register(&c, lock, 15).await, lock, 15, 20);
    assert_eq!(pg::read_set(&c, "s").await.unwrap(), vec![1]);
    assert_eq!(pg::stock(&c, "widget").await.unwrap(), 3);
    let orders: i64 = c.query_one("SELECT count(*) FROM orders", &[]).await.unwrap().get(0);
    assert_eq!(orders, 0);
    // The current token, registered again (equal), writes.
    pg::register(&c, lock, 20).await.unwrap();
    pg::write_set(&c, lock, 20, "s", &[1, 3]).await.unwrap();
    assert_eq!(pg::place_order(&c, lock, 20, "alice", "widget").await.unwrap(), OrderOutcome::Placed);
    assert_eq!(pg::decrement_stock(&c, lock, 20, "widget").await.unwrap(), StockOutcome::Sold { left: 2 });
    assert_eq!(pg::read_set(&c, "s").await.unwrap(), vec![1, 3]);
    // A write with a higher token than the fence raises it (it registers as it writes).
    pg::write_set(&c, lock, 30, "s", &[4]).await.unwrap();
    assert_stale(pg::write_set(&c, lock, 20, "s", &[5]).await, lock, 20, 30);
    assert_eq!(pg::read_set(&c, "s").await.unwrap(), vec![4]);
    // Tokens above 2^53 are exact in a bigint (Redis needs care there, PostgreSQL none).
    let big = 1_i64 << 53;
    pg::register(&c, "/locks/big", big + 1).await.unwrap();
    assert_stale(pg::register(&c, "/locks/big", big).await, "/locks/big", big, big + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_lock_paths_have_separate_fences() {
    let server = server().await;
    let mut c = connected(&server).await;
    shared::two_lock_paths_have_separate_fences(&mut c).await;
    let fences: Vec<(String, i64)> = c
        .query("SELECT lock_path, token FROM fences ORDER BY lock_path", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(fences, vec![("/locks/a".to_string(), 1000), ("/locks/b".to_string(), 6)]);
}

/// `shared::registering_before_reading_prevents_the_lost_update`: the lost update without
/// registering before the read, none with it; the interleaving made by hand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registering_before_reading_prevents_the_lost_update() {
    let server = server().await;
    let (mut a, mut b) = (connected(&server).await, connected(&server).await);
    shared::registering_before_reading_prevents_the_lost_update(&mut a, &mut b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_with_shuffled_tokens_end_on_the_highest() {
    let server = server().await;
    let mut admin = connected(&server).await;
    let mut rng = Rng(seed());
    const WRITERS: i64 = 24;
    for round in 0..3 {
        let (lock, key) = (format!("/locks/race{round}"), format!("race{round}"));
        let tokens: Vec<i64> = (1..=WRITERS).map(|t| t * 1000 + round).collect();
        let mut writers = Vec::new();
        for _ in &tokens {
            writers.push(pg::connect(&server.connect_params()).await.unwrap());
        }
        let highest = *tokens.iter().max().unwrap();
        let refused =
            shared::race_shuffled_tokens(&mut rng, tokens, writers, (&lock, &key), &mut admin).await;
        let fence: i64 =
            admin.query_one("SELECT token FROM fences WHERE lock_path = $1", &[&lock]).await.unwrap().get(0);
        assert_eq!(fence, highest);
        tracing::info!(round, refused, "race done");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_never_goes_below_zero_and_each_user_orders_once() {
    let server = server().await;
    let admin = connected(&server).await;
    pg::set_stock(&admin, "widget", 5).await.unwrap();
    // 20 buyers, each under its own lock path (the per-user lock), race for 5 items.
    let mut tasks = Vec::new();
    for user in 0..20_i64 {
        let c = pg::connect(&server.connect_params()).await.unwrap();
        tasks.push(tokio::spawn(async move {
            let lock = format!("/sale/user-{user}");
            pg::register(&c, &lock, 100 + user).await.unwrap();
            pg::decrement_stock(&c, &lock, 100 + user, "widget").await.unwrap()
        }));
    }
    let mut sold = 0;
    for task in tasks {
        if let StockOutcome::Sold { left } = within("a buyer", task).await.unwrap() {
            assert!(left >= 0);
            sold += 1;
        }
    }
    assert_eq!(sold, 5);
    assert_eq!(pg::stock(&admin, "widget").await.unwrap(), 0);
    // One user's order, tried 8 times at once with the same hold's token: one is placed.
    pg::register(&admin, "/sale/user-bob", 7).await.unwrap();
    let mut tries = Vec::new();
    for _ in 0..8 {
        let c = pg::connect(&server.connect_params()).await.unwrap();
        tries.push(tokio::spawn(
            async move { pg::place_order(&c, "/sale/user-bob", 7, "bob", "widget").await },
        ));
    }
    let mut placed = 0;
    for t in tries {
        match within("an order", t).await.unwrap().unwrap() {
            OrderOutcome::Placed => placed += 1,
            OrderOutcome::AlreadyOrdered => {}
        }
    }
    assert_eq!(placed, 1);
    let bobs: i64 =
        admin.query_one("SELECT count(*) FROM orders WHERE user_id = 'bob'", &[]).await.unwrap().get(0);
    assert_eq!(bobs, 1);
}

/// End to end (`shared::a_holder_whose_session_ended_and_the_next`): A holds the lock in
/// session 1, registers and writes; session 1 ends; B takes the lock in session 2, registers,
/// writes; A's late write, with its old token, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_session_ended_is_refused_after_the_next_holder_wrote() {
    let zk = standalone().await;
    let server = server().await;
    let c = connected(&server).await;
    let lock = "/locks/fenced-pg";
    let (token_a, b) = shared::a_holder_whose_session_ended_and_the_next(
        &zk.connect_string(),
        lock,
        async |a: &zk_recipes::LockGuard| {
            let token_a = a.fencing_token_i64();
            assert_eq!(token_a as u64, a.fencing_token(), "the token fits a bigint unchanged");
            pg::register(&c, lock, token_a).await.unwrap();
            pg::write_set(&c, lock, token_a, "acct", &[1]).await.unwrap();
        },
    )
    .await;
    let token_b = b.fencing_token_i64();
    pg::register(&c, lock, token_b).await.unwrap();
    let read = pg::read_set(&c, "acct").await.unwrap();
    pg::write_set(&c, lock, token_b, "acct", &[read, vec![2]].concat()).await.unwrap();
    // A's late write: its token is the one it was given, below B's.
    assert_stale(pg::write_set(&c, lock, token_a, "acct", &[1, 99]).await, lock, token_a, token_b);
    assert_stale(pg::place_order(&c, lock, token_a, "a", "widget").await, lock, token_a, token_b);
    assert_eq!(pg::read_set(&c, "acct").await.unwrap(), vec![1, 2]);
    b.release().await.unwrap();
}

/// The number of committed transactions in `db`, as the statistics show after the writer's
/// last `pg_stat_force_next_flush()` (a backend flushes before it answers ReadyForQuery).
async fn commits(observer: &Client, db: &str) -> i64 {
    observer
        .query_one("SELECT xact_commit FROM pg_stat_database WHERE datname = $1", &[&db])
        .await
        .unwrap()
        .get(0)
}

/// `xact_commit` in autocommit counts statements: the fenced write adds one (the statement),
/// a check-then-write adds two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_write_is_one_statement_at_the_server() {
    init_tracing();
    let config = PostgresConfig { settings: vec![("autovacuum".into(), "off".into())], ..Default::default() };
    let server = within("PostgreSQL to start", PostgresServer::start_with(config)).await.unwrap();
    let observer = connected(&server).await;
    observer.batch_execute("CREATE DATABASE counted").await.unwrap();
    let w = pg::connect(&server.connect_params().replace("dbname=postgres", "dbname=counted")).await.unwrap();
    pg::install_schema(&w).await.unwrap();
    pg::register(&w, "/locks/one", 5).await.unwrap();
    // One transaction (a simple query's statements share one) that asks for the flush and reads
    // a table: PostgreSQL flushes only when some table's statistics are pending.
    let flush = || async {
        w.batch_execute("SELECT pg_stat_force_next_flush(); SELECT count(*) FROM fences").await.unwrap()
    };
    flush().await;
    // What measuring costs: the flush call itself.
    let before = commits(&observer, "counted").await;
    flush().await;
    let cost = commits(&observer, "counted").await - before;
    assert_eq!(cost, 1);
    for (what, expect) in [("fenced write", 1), ("refused write", 2), ("check then write", 2)] {
        let before = commits(&observer, "counted").await;
        match what {
            "fenced write" => pg::write_set(&w, "/locks/one", 5, "k", &[1]).await.unwrap(),
            "refused write" => {
                assert!(pg::write_set(&w, "/locks/one", 4, "k", &[2]).await.unwrap_err().is_stale())
            }
            _ => {
                let path = "/locks/one";
                let fence: i64 =
                    w.query_typed_one(pg::HIGHEST_SQL, &[(&path, Type::TEXT)]).await.unwrap().get(0);
                assert_eq!(fence, 5);
                pg::write_set_unfenced(&w, "k", &[3]).await.unwrap();
            }
        }
        flush().await;
        let statements = commits(&observer, "counted").await - before - cost;
        assert_eq!(statements, expect, "{what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_gives_a_typed_error_naming_its_address() {
    let mut server = server().await;
    let c = connected(&server).await;
    let addr = server.addr().to_string();
    server.stop();
    // An established connection: a typed error (the write's outcome is unknown), no panic.
    let write = within("a write to a stopped server", pg::write_set(&c, "/l", 1, "k", &[1])).await;
    assert!(matches!(write, Err(FenceError::Postgres(_))), "{write:?}");
    // A new connection: refused, naming the resource and the address.
    let err =
        within("a connect to a stopped server", pg::connect(&server.connect_params())).await.unwrap_err();
    shared::assert_refused_connect("postgres", &err, &addr);
    // Unreadable parameters: a typed error too.
    let bad = pg::connect("host=127.0.0.1 port=notaport").await.unwrap_err();
    assert!(matches!(bad, FenceError::Connect { resource: "postgres", .. }), "{bad:?}");
}

/// How many backends wait for a lock whose query starts with `prefix`.
async fn lock_waiters(observer: &Client, prefix: &str) -> i64 {
    let pattern = format!("{prefix}%");
    observer
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1",
            &[&pattern],
        )
        .await
        .unwrap()
        .get(0)
}

/// The write a plain subquery on `fences` would make: the fence is read from the statement's
/// snapshot, taken before it waited for the row. The pattern never does this.
const NAIVE_WRITE_SQL: &str =
    "UPDATE sets SET elems = $3 WHERE key = $1 AND (SELECT token FROM fences WHERE lock_path = $2) <= $4";

/// Under READ COMMITTED, A's write waits for a row lock (held here by a third transaction, as
/// any concurrent writer of the row would) while B registers and reads. With a plain subquery
/// on `fences`, A's write then lands on the fence its snapshot saw, after B's register: B's
/// write erases it (a lost update). With the pattern, A's write holds the fence row, so B's
/// register waits for A's write to commit, and B's read sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_check_is_not_fooled_by_a_stale_snapshot() {
    let server = server().await;
    let (observer, b, x) = (connected(&server).await, connected(&server).await, connected(&server).await);
    let a = Arc::new(connected(&server).await);
    for (pattern, lock, key) in [(false, "/locks/naive", "naive"), (true, "/locks/pattern", "pattern")] {
        pg::write_set_unfenced(&b, key, &[]).await.unwrap();
        pg::register(&b, lock, 10).await.unwrap();
        x.batch_execute("BEGIN").await.unwrap();
        x.query("SELECT 1 FROM sets WHERE key = $1 FOR UPDATE", &[&key]).await.unwrap();
        let a_write = tokio::spawn({
            let a = a.clone();
            async move {
                if pattern {
                    pg::write_set(&a, lock, 10, key, &[1]).await.map(|()| 1)
                } else {
                    let elems: &[i64] = &[1];
                    a.execute(NAIVE_WRITE_SQL, &[&key, &lock, &elems, &10_i64])
                        .await
                        .map_err(FenceError::Postgres)
                }
            }
        });
        let a_prefix = if pattern { "WITH f AS" } else { "UPDATE sets" };
        eventually("A's write to wait for the row", || async {
            lock_waiters(&observer, a_prefix).await == 1
        })
        .await;
        // B takes over: registers (with the pattern, this waits for A's write), then reads.
        let mut b_register = tokio::spawn({
            let b_params = server.connect_params();
            async move {
                let b2 = pg::connect(&b_params).await.unwrap();
                pg::register(&b2, lock, 20).await
            }
        });
        if pattern {
            eventually("B's register to wait for A's fence row", || async {
                lock_waiters(&observer, "INSERT INTO fences").await == 1
            })
            .await;
        } else {
            within("B's register", &mut b_register).await.unwrap().unwrap();
        }
        let b_read_early = if pattern { None } else { Some(pg::read_set(&b, key).await.unwrap()) };
        x.batch_execute("COMMIT").await.unwrap();
        let a_written = within("A's write", a_write).await.unwrap().unwrap();
        assert_eq!(a_written, 1, "A's write was acknowledged");
        let b_read = match b_read_early {
            Some(read) => read,
            None => {
                within("B's register", &mut b_register).await.unwrap().unwrap();
                pg::read_set(&b, key).await.unwrap()
            }
        };
        pg::write_set(&b, lock, 20, key, &[b_read, vec![2]].concat()).await.unwrap();
        let final_set = pg::read_set(&b, key).await.unwrap();
        if pattern {
            assert_eq!(final_set, vec![1, 2], "the pattern loses nothing");
        } else {
            assert_eq!(final_set, vec![2], "the plain subquery lets A's acknowledged write be lost");
        }
    }
}

/// The token is the lock node's czxid: strictly increasing per lock path across holders and
/// sessions, comparable with any other client's node on the path (a Curator or kazoo peer's
/// node: its czxid, read from its stat), and still increasing after the lock path is deleted
/// and created again (a zxid is global, unlike a sequence number). The fence accepts each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_across_holders_peers_and_a_recreated_lock_path() {
    use zk_recipes::zookeeper_client::{Acls, CreateMode};
    let zk = standalone().await;
    let server = server().await;
    let c = connected(&server).await;
    let lock = "/locks/tokens";
    let mut tokens = Vec::new();
    let mut accept = |token: i64| {
        tokens.push(token);
        tokens.clone()
    };
    // Two holders in two sessions.
    for _ in 0..2 {
        let s = session(&zk.connect_string()).await;
        let g = InterProcessMutex::new(&s, lock).unwrap().acquire().await.unwrap();
        pg::register(&c, lock, g.fencing_token_i64()).await.unwrap();
        accept(g.fencing_token_i64());
        g.release().await.unwrap();
        s.close().await;
    }
    // A peer's lock node (another library's), its czxid read from its stat.
    let peer = client(&zk.connect_string()).await;
    let (stat, seq) = peer
        .create(
            &format!("{lock}/_c_peer-lock-"),
            b"peer",
            &CreateMode::EphemeralSequential.with_acls(Acls::anyone_all()),
        )
        .await
        .unwrap();
    pg::register(&c, lock, stat.czxid).await.unwrap();
    accept(stat.czxid);
    peer.delete(&format!("{lock}/_c_peer-lock-{seq}"), None).await.unwrap();
    // The lock path deleted and created again: the sequence numbers start over, tokens do not.
    peer.delete(lock, None).await.unwrap();
    let s = session(&zk.connect_string()).await;
    let g = InterProcessMutex::new(&s, lock).unwrap().acquire().await.unwrap();
    assert!(g.node_path().ends_with("0000000000"), "a fresh sequence: {}", g.node_path());
    pg::register(&c, lock, g.fencing_token_i64()).await.unwrap();
    let tokens = accept(g.fencing_token_i64());
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "strictly increasing: {tokens:?}");
    g.release().await.unwrap();
}

/// After ZooKeeper is restored from an older backup, zxids can go back: a new holder's token
/// can be below the fence. The fence refuses it (safe, but stuck) until an operator, once no
/// holder from before the restore can be alive, clears the fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_left_too_high_refuses_until_an_operator_clears_it() {
    let server = server().await;
    let c = connected(&server).await;
    let lock = "/locks/restored";
    pg::register(&c, lock, 9_000).await.unwrap(); // a token from before the restore
    assert_stale(pg::register(&c, lock, 120).await, lock, 120, 9_000);
    assert_stale(pg::write_set(&c, lock, 120, "k", &[1]).await, lock, 120, 9_000);
    // The operator's fix (docs/fencing.md).
    c.execute("DELETE FROM fences WHERE lock_path = $1", &[&lock]).await.unwrap();
    pg::register(&c, lock, 120).await.unwrap();
    pg::write_set(&c, lock, 120, "k", &[1]).await.unwrap();
    assert_eq!(pg::read_set(&c, "k").await.unwrap(), vec![1]);
}
