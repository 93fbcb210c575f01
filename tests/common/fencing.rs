//! What the fencing tests of PostgreSQL and Redis (`tests/fencing_postgres.rs`,
//! `tests/fencing_redis.rs`) share: one [`Store`] over each resource's fenced calls
//! (`examples/fencing/`), and the scenarios both run on it. Included by those two only, beside
//! `mod common;` and the example's `mod fencing;`:
//! `#[path = "common/fencing.rs"] mod shared;` (the other tests do not build the example).

use std::future::Future;
use std::sync::Arc;

use zk_recipes::{InterProcessMutex, LockGuard};

use crate::common::{session, within, Rng};
use crate::fencing::{postgres as pg, redis as rs, FenceError, StaleToken};

/// A connection to a resource that fences writes: the calls every pattern has, by name.
pub trait Store: Send + 'static {
    /// `"postgres"` or `"redis"`, as [`StaleToken::resource`] says.
    const RESOURCE: &'static str;

    fn register(&mut self, lock: &str, token: i64) -> impl Future<Output = Result<(), FenceError>> + Send;

    fn read_set(&mut self, key: &str) -> impl Future<Output = Result<Vec<i64>, FenceError>> + Send;

    fn write_set(
        &mut self,
        lock: &str,
        token: i64,
        key: &str,
        elems: &[i64],
    ) -> impl Future<Output = Result<(), FenceError>> + Send;

    fn write_set_unfenced(
        &mut self,
        key: &str,
        elems: &[i64],
    ) -> impl Future<Output = Result<(), FenceError>> + Send;
}

/// A [`Store`] for `$connection`, forwarding to the example's module `$calls`.
macro_rules! store {
    ($connection:ty, $resource:literal, $calls:ident) => {
        impl Store for $connection {
            const RESOURCE: &'static str = $resource;

            async fn register(&mut self, lock: &str, token: i64) -> Result<(), FenceError> {
                $calls::register(self, lock, token).await
            }

            async fn read_set(&mut self, key: &str) -> Result<Vec<i64>, FenceError> {
                $calls::read_set(self, key).await
            }

            async fn write_set(
                &mut self,
                lock: &str,
                token: i64,
                key: &str,
                elems: &[i64],
            ) -> Result<(), FenceError> {
                $calls::write_set(self, lock, token, key, elems).await
            }

            async fn write_set_unfenced(&mut self, key: &str, elems: &[i64]) -> Result<(), FenceError> {
                $calls::write_set_unfenced(self, key, elems).await
            }
        }
    };
}

store!(tokio_postgres::Client, "postgres", pg);
store!(redis::aio::MultiplexedConnection, "redis", rs);

/// The server `start` starts (`what`: its name), with the tests' tracing on.
pub async fn started<T, E: std::fmt::Debug>(what: &str, start: impl Future<Output = Result<T, E>>) -> T {
    crate::common::init_tracing();
    within(&format!("{what} to start"), start).await.unwrap_or_else(|e| panic!("start {what}: {e:?}"))
}

/// The refusal `r` must be: `resource`'s, stale, for `token`, with `highest`.
#[track_caller]
pub fn assert_stale<T: std::fmt::Debug>(
    resource: &'static str,
    r: Result<T, FenceError>,
    lock_path: &str,
    token: i64,
    highest: i64,
) {
    match r {
        Err(FenceError::Stale(s)) => {
            assert_eq!(s, StaleToken { resource, lock_path: lock_path.to_string(), token, highest })
        }
        other => panic!("expected StaleToken for token {token} (highest {highest}), got {other:?}"),
    }
}

/// Two lock paths, two fences: a low token of one is never compared with the other's fence.
pub async fn two_lock_paths_have_separate_fences<S: Store>(c: &mut S) {
    c.register("/locks/a", 1000).await.unwrap();
    // A low token of another lock path is never compared with /locks/a's fence.
    c.register("/locks/b", 5).await.unwrap();
    c.write_set("/locks/b", 5, "b", &[5]).await.unwrap();
    c.write_set("/locks/a", 1000, "a", &[1000]).await.unwrap();
    assert_stale(S::RESOURCE, c.write_set("/locks/a", 999, "a", &[999]).await, "/locks/a", 999, 1000);
    c.write_set("/locks/b", 6, "b", &[6]).await.unwrap();
    assert_eq!(c.read_set("a").await.unwrap(), vec![1000]);
    assert_eq!(c.read_set("b").await.unwrap(), vec![6]);
}

/// Holder A (token 10) read the set and is about to write when it stalls; holder B (token 20)
/// takes over. Without registering before its read, B reads, A's late write lands (its token
/// is still the fence), and B's write, based on a read without A's element, erases it: A's
/// acknowledged add is lost. Registering first, A's write is refused and nothing is lost.
/// The interleaving is made by hand, step by step, with A's and B's connections.
pub async fn registering_before_reading_prevents_the_lost_update<S: Store>(a: &mut S, b: &mut S) {
    for (discipline, lock, key) in [(false, "/locks/late", "late"), (true, "/locks/first", "first")] {
        a.write_set_unfenced(key, &[]).await.unwrap();
        // A holds, registers, reads.
        a.register(lock, 10).await.unwrap();
        let a_read = a.read_set(key).await.unwrap();
        // A stalls; its lock is lost; B holds with token 20.
        if discipline {
            b.register(lock, 20).await.unwrap();
        }
        let b_read = b.read_set(key).await.unwrap();
        // A's late write, between B's read and B's write.
        let a_write = a.write_set(lock, 10, key, &[a_read, vec![1]].concat()).await;
        b.write_set(lock, 20, key, &[b_read, vec![2]].concat()).await.unwrap();
        let acknowledged: Vec<i64> = if a_write.is_ok() { vec![1, 2] } else { vec![2] };
        let final_set = b.read_set(key).await.unwrap();
        let lost: Vec<i64> = acknowledged.iter().copied().filter(|e| !final_set.contains(e)).collect();
        if discipline {
            assert_stale(S::RESOURCE, a_write, lock, 10, 20);
            assert!(lost.is_empty(), "registered first, nothing may be lost: {final_set:?}");
        } else {
            assert!(a_write.is_ok(), "without registering, A's write passes the fence");
            assert_eq!(lost, vec![1], "without registering first, A's acknowledged add is lost");
        }
    }
}

/// One round of racing writers: `tokens`, shuffled, each written at once (behind one barrier)
/// by its own connection from `writers`, into the set `key` under `lock`. Every refusal names
/// the writer's token and a higher one; the set ends as the highest token's write. Returns how
/// many writes were refused.
pub async fn race_shuffled_tokens<S: Store>(
    rng: &mut Rng,
    mut tokens: Vec<i64>,
    writers: Vec<S>,
    (lock, key): (&str, &str),
    reader: &mut S,
) -> usize {
    for i in (1..tokens.len()).rev() {
        tokens.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let start = Arc::new(tokio::sync::Barrier::new(tokens.len()));
    let mut tasks = Vec::new();
    for (token, mut c) in tokens.iter().copied().zip(writers) {
        let (start, lock, key) = (start.clone(), lock.to_string(), key.to_string());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            (token, c.write_set(&lock, token, &key, &[token]).await)
        }));
    }
    let mut refused = 0;
    for task in tasks {
        let (token, result) = within("a writer", task).await.unwrap();
        match result {
            Ok(()) => {}
            Err(FenceError::Stale(s)) => {
                assert_eq!((s.resource, s.lock_path.as_str(), s.token), (S::RESOURCE, lock, token));
                assert!(s.highest > token, "refused {token} with highest {}", s.highest);
                refused += 1;
            }
            Err(e) => panic!("writer {token}: {e}"),
        }
    }
    let highest = *tokens.iter().max().unwrap();
    assert_eq!(reader.read_set(key).await.unwrap(), vec![highest], "{lock}");
    refused
}

/// The ZooKeeper side of the end-to-end tests: A holds `lock` in a first session and registers
/// its token with `register_a`; that session ends (closed: its node is deleted, as on an
/// expiry) and A is told; B takes the lock in a second session. Returns A's token and B's guard,
/// whose token is higher.
pub async fn a_holder_whose_session_ended_and_the_next(
    connect: &str,
    lock: &str,
    register_a: impl AsyncFnOnce(&LockGuard),
) -> (i64, LockGuard) {
    let s1 = session(connect).await;
    let a = InterProcessMutex::new(&s1, lock).unwrap().acquire().await.unwrap();
    register_a(&a).await;
    s1.close().await;
    within("A's hold to be lost", a.lost()).await;

    let s2 = session(connect).await;
    let b = within("B's acquire", InterProcessMutex::new(&s2, lock).unwrap().acquire()).await.unwrap();
    let (token_a, token_b) = (a.fencing_token_i64(), b.fencing_token_i64());
    assert!(token_b > token_a, "tokens increase across holders: {token_a} then {token_b}");
    (token_a, b)
}

/// A stopped server: a connect's refusal names the resource and `addr`.
#[track_caller]
pub fn assert_refused_connect(resource: &'static str, err: &FenceError, addr: &str) {
    match err {
        FenceError::Connect { resource: r, addr: a, .. } if *r == resource => assert_eq!(a, addr),
        other => panic!("{other:?}"),
    }
    let text = err.to_string();
    assert!(text.starts_with(&format!("{resource} at {addr}: ")), "{text}");
    assert!(text.to_lowercase().contains("refused"), "{text}");
    tracing::info!(%text, "the refusal");
}
