//! The Redis fencing pattern (`examples/fencing/redis.rs`, `docs/fencing.md`) against a real
//! Redis server (and a real ZooKeeper where a lock is involved).

mod common;
#[path = "../examples/fencing/mod.rs"]
mod fencing;
#[path = "common/fencing.rs"]
mod shared;

use common::*;
use fencing::redis::{self as rs};
use fencing::{FenceError, StockOutcome};
use redis::aio::MultiplexedConnection;
use zk_testcluster::RedisServer;

async fn server() -> RedisServer {
    shared::started("Redis", RedisServer::start()).await
}

async fn connected(server: &RedisServer) -> MultiplexedConnection {
    rs::connect(&server.url()).await.expect("connect to Redis")
}

/// The refusal `r` must be: stale, for `token`, with `highest`.
#[track_caller]
fn assert_stale<T: std::fmt::Debug>(r: Result<T, FenceError>, lock_path: &str, token: i64, highest: i64) {
    shared::assert_stale("redis", r, lock_path, token, highest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepts_the_current_token_refuses_an_older_one_and_an_equal_one_passes() {
    let server = server().await;
    let mut c = connected(&server).await;
    let lock = "/locks/sale";
    rs::register(&mut c, lock, 10).await.unwrap();
    rs::write_set(&mut c, lock, 10, "s", &[1]).await.unwrap();
    rs::set_stock(&mut c, "widget", 3).await.unwrap();
    rs::register(&mut c, lock, 20).await.unwrap();
    assert_stale(rs::write_set(&mut c, lock, 10, "s", &[1, 2]).await, lock, 10, 20);
    assert_stale(rs::decrement_stock(&mut c, lock, 10, "widget").await, lock, 10, 20);
    assert_stale(rs::register(&mut c, lock, 15).await, lock, 15, 20);
    assert_eq!(rs::read_set(&mut c, "s").await.unwrap(), vec![1]);
    assert_eq!(rs::stock(&mut c, "widget").await.unwrap(), 3);
    rs::register(&mut c, lock, 20).await.unwrap();
    rs::write_set(&mut c, lock, 20, "s", &[1, 3]).await.unwrap();
    assert_eq!(
        rs::decrement_stock(&mut c, lock, 20, "widget").await.unwrap(),
        StockOutcome::Sold { left: 2 }
    );
    assert_eq!(rs::read_set(&mut c, "s").await.unwrap(), vec![1, 3]);
    rs::write_set(&mut c, lock, 30, "s", &[4]).await.unwrap();
    assert_stale(rs::write_set(&mut c, lock, 20, "s", &[5]).await, lock, 20, 30);
    // The fence is stored as 20 digits.
    let fence: String = redis::cmd("GET").arg(rs::fence_key(lock)).query_async(&mut c).await.unwrap();
    assert_eq!(fence, "00000000000000000030");
    // A negative token is refused by the script (a Redis error, nothing written).
    let negative = rs::write_set(&mut c, lock, -40, "s", &[6]).await;
    assert!(matches!(negative, Err(FenceError::Redis(_))), "{negative:?}");
    assert_eq!(rs::read_set(&mut c, "s").await.unwrap(), vec![4]);
}

/// Lua numbers are doubles: 2^53 + 1 reads as 2^53. The pattern compares exactly; a script
/// that compares `tonumber` values lets the older token through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_above_two_to_the_53_compare_exactly() {
    let server = server().await;
    let mut c = connected(&server).await;
    let big = 1_i64 << 53;
    rs::register(&mut c, "/locks/big", big + 1).await.unwrap();
    assert_stale(rs::register(&mut c, "/locks/big", big).await, "/locks/big", big, big + 1);
    assert_stale(rs::write_set(&mut c, "/locks/big", big, "big", &[1]).await, "/locks/big", big, big + 1);
    rs::write_set(&mut c, "/locks/big", big + 1, "big", &[2]).await.unwrap();
    rs::write_set(&mut c, "/locks/big", i64::MAX, "big", &[3]).await.unwrap();
    assert_stale(
        rs::write_set(&mut c, "/locks/big", i64::MAX - 1, "big", &[4]).await,
        "/locks/big",
        i64::MAX - 1,
        i64::MAX,
    );
    assert_eq!(rs::read_set(&mut c, "big").await.unwrap(), vec![3]);
    // The naive comparison, for contrast: it takes 2^53 for no older than 2^53 + 1.
    let naive = redis::Script::new(
        "local f = redis.call('GET', KEYS[1]) \
         if f and tonumber(ARGV[1]) < tonumber(f) then return 0 end \
         redis.call('SET', KEYS[1], ARGV[1]) return 1",
    );
    let _: i64 = naive.key("naive").arg((big + 1).to_string()).invoke_async(&mut c).await.unwrap();
    let accepted: i64 = naive.key("naive").arg(big.to_string()).invoke_async(&mut c).await.unwrap();
    assert_eq!(accepted, 1, "the naive script lets the older token through");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_lock_paths_have_separate_fences() {
    let server = server().await;
    let mut c = connected(&server).await;
    shared::two_lock_paths_have_separate_fences(&mut c).await;
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
    let big = 1_i64 << 53;
    for round in 0..3 {
        let (lock, key) = (format!("/locks/race{round}"), format!("race{round}"));
        // Round 2 races tokens around 2^53, where a double would confuse neighbours.
        let base = if round == 2 { big - WRITERS / 2 } else { 0 };
        let tokens: Vec<i64> = (1..=WRITERS).map(|t| base + t).collect();
        let mut writers = Vec::new();
        for _ in &tokens {
            writers.push(connected(&server).await);
        }
        shared::race_shuffled_tokens(&mut rng, tokens, writers, (&lock, &key), &mut admin).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_never_goes_below_zero() {
    let server = server().await;
    let mut admin = connected(&server).await;
    rs::set_stock(&mut admin, "widget", 5).await.unwrap();
    let mut tasks = Vec::new();
    for user in 0..20_i64 {
        let mut c = connected(&server).await;
        tasks.push(tokio::spawn(async move {
            let lock = format!("/sale/user-{user}");
            rs::register(&mut c, &lock, 100 + user).await.unwrap();
            let first = rs::decrement_stock(&mut c, &lock, 100 + user, "widget").await.unwrap();
            let second = rs::decrement_stock(&mut c, &lock, 100 + user, "widget").await.unwrap();
            [first, second]
        }));
    }
    let mut sold = 0;
    for task in tasks {
        for outcome in within("a buyer", task).await.unwrap() {
            if let StockOutcome::Sold { left } = outcome {
                assert!(left >= 0);
                sold += 1;
            }
        }
    }
    assert_eq!(sold, 5);
    assert_eq!(rs::stock(&mut admin, "widget").await.unwrap(), 0);
    assert_eq!(rs::decrement_stock(&mut admin, "/sale/x", 1, "widget").await.unwrap(), StockOutcome::SoldOut);
    assert_eq!(rs::stock(&mut admin, "widget").await.unwrap(), 0);
}

/// End to end (`shared::a_holder_whose_session_ended_and_the_next`): A's session ends, B
/// takes the lock, registers and writes; A's late writes with its old token are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_session_ended_is_refused_after_the_next_holder_wrote() {
    let zk = standalone().await;
    let server = server().await;
    let mut c = connected(&server).await;
    let lock = "/locks/fenced-redis";
    rs::set_stock(&mut c, "widget", 10).await.unwrap();
    let (token_a, b) = shared::a_holder_whose_session_ended_and_the_next(
        &zk.connect_string(),
        lock,
        async |a: &zk_recipes::LockGuard| rs::register(&mut c, lock, a.fencing_token_i64()).await.unwrap(),
    )
    .await;
    let token_b = b.fencing_token_i64();
    rs::register(&mut c, lock, token_b).await.unwrap();
    assert_eq!(
        rs::decrement_stock(&mut c, lock, token_b, "widget").await.unwrap(),
        StockOutcome::Sold { left: 9 }
    );
    assert_stale(rs::decrement_stock(&mut c, lock, token_a, "widget").await, lock, token_a, token_b);
    assert_stale(rs::write_set(&mut c, lock, token_a, "late", &[1]).await, lock, token_a, token_b);
    assert_eq!(rs::stock(&mut c, "widget").await.unwrap(), 9);
    b.release().await.unwrap();
}

/// `(total_commands_processed, calls of each command)` from `INFO`.
async fn counters(c: &mut MultiplexedConnection) -> (i64, std::collections::HashMap<String, i64>) {
    let info: String = redis::cmd("INFO").arg("everything").query_async(c).await.unwrap();
    let mut total = 0;
    let mut calls = std::collections::HashMap::new();
    for line in info.lines() {
        if let Some(n) = line.strip_prefix("total_commands_processed:") {
            total = n.trim().parse().unwrap();
        } else if let Some(rest) = line.strip_prefix("cmdstat_") {
            let (name, stats) = rest.split_once(':').unwrap();
            let n = stats.split(',').find_map(|kv| kv.strip_prefix("calls=")).unwrap();
            calls.insert(name.to_string(), n.parse().unwrap());
        }
    }
    (total, calls)
}

/// Each fenced write is one command at the server (`EVALSHA`): besides the one `INFO` that
/// read the counters and the commands the script itself called, the total moves by one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_write_is_one_command_at_the_server() {
    let server = server().await;
    let mut c = connected(&server).await;
    let mut observer = connected(&server).await;
    rs::set_stock(&mut c, "widget", 5).await.unwrap();
    // Load the scripts (the first call of each sends the body once).
    rs::register(&mut c, "/locks/one", 5).await.unwrap();
    rs::write_set(&mut c, "/locks/one", 5, "k", &[0]).await.unwrap();
    rs::decrement_stock(&mut c, "/locks/one", 5, "widget").await.unwrap();
    let plans = [
        ("register", 1),
        ("write_set", 1),
        ("decrement_stock", 1),
        ("refused write_set", 1),
        ("check then write", 2),
    ];
    for (what, commands) in plans {
        let (total, calls) = counters(&mut observer).await;
        match what {
            "register" => rs::register(&mut c, "/locks/one", 5).await.unwrap(),
            "write_set" => rs::write_set(&mut c, "/locks/one", 5, "k", &[1]).await.unwrap(),
            "decrement_stock" => drop(rs::decrement_stock(&mut c, "/locks/one", 5, "widget").await.unwrap()),
            "refused write_set" => {
                assert!(rs::write_set(&mut c, "/locks/one", 4, "k", &[2]).await.unwrap_err().is_stale())
            }
            // For contrast: a check and a write in two commands, which another client's write
            // can come between.
            _ => {
                let fence: String =
                    redis::cmd("GET").arg(rs::fence_key("/locks/one")).query_async(&mut c).await.unwrap();
                assert_eq!(fence, rs::token_arg(5));
                rs::write_set_unfenced(&mut c, "k", &[3]).await.unwrap();
            }
        }
        let (total_after, calls_after) = counters(&mut observer).await;
        let delta = |name: &str| calls_after.get(name).unwrap_or(&0) - calls.get(name).unwrap_or(&0);
        // Redis also counts the commands a script calls (GET, SET, DECR) in the total.
        let scripts = delta("evalsha");
        let inside_scripts = if scripts > 0 { delta("get") + delta("set") + delta("decr") } else { 0 };
        assert_eq!(delta("info"), 1, "{what}");
        assert_eq!(
            total_after - total - delta("info") - inside_scripts,
            commands,
            "{what}: commands from clients"
        );
        assert_eq!(scripts, if commands == 1 { 1 } else { 0 }, "{what}");
        assert_eq!(delta("eval"), 0, "{what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_gives_a_typed_error_naming_its_address() {
    let mut server = server().await;
    let mut c = connected(&server).await;
    let addr = server.addr().to_string();
    server.stop();
    let write = within("a write to a stopped server", rs::write_set(&mut c, "/l", 1, "k", &[1])).await;
    assert!(matches!(write, Err(FenceError::Redis(_))), "{write:?}");
    let err = within("a connect to a stopped server", rs::connect(&server.url())).await.unwrap_err();
    shared::assert_refused_connect("redis", &err, &addr);
    let bad = rs::connect("not a url").await.unwrap_err();
    assert!(matches!(bad, FenceError::Connect { resource: "redis", .. }), "{bad:?}");
}

/// As in `tests/fencing_postgres.rs`: a fence above every new token (ZooKeeper restored from an
/// older backup) refuses until an operator deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_left_too_high_refuses_until_an_operator_clears_it() {
    let server = server().await;
    let mut c = connected(&server).await;
    let lock = "/locks/restored";
    rs::register(&mut c, lock, 9_000).await.unwrap();
    assert_stale(rs::register(&mut c, lock, 120).await, lock, 120, 9_000);
    assert_stale(rs::write_set(&mut c, lock, 120, "k", &[1]).await, lock, 120, 9_000);
    redis::cmd("DEL").arg(rs::fence_key(lock)).query_async::<()>(&mut c).await.unwrap();
    rs::register(&mut c, lock, 120).await.unwrap();
    rs::write_set(&mut c, lock, 120, "k", &[1]).await.unwrap();
    assert_eq!(rs::read_set(&mut c, "k").await.unwrap(), vec![1]);
}
