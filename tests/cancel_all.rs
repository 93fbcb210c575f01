//! Every recipe: futures dropped at random points (seeded, replayable with ZK_TEST_SEED) leave
//! no node of ours behind.

mod common;

use common::*;
use zk_recipes::{
    InterProcessMultiLock, InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphore,
    InterProcessSemaphoreMutex, LeaderLatch, LeaderSelector, SelectorOptions,
};

const ROUNDS: usize = 60;

fn seed() -> u64 {
    std::env::var("ZK_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_2026)
}

/// `ROUNDS` rounds: a blocker holds the lock half the time (`busy` gives its guard), and the
/// contender's `attempt` is dropped at a random point (or completes, and its guard is dropped).
/// Then no node under `dirs` may belong to the contender's `session`.
macro_rules! fuzz {
    ($zk:expr, $session:expr, $dirs:expr, busy = $busy:expr, attempt($rng:ident) = $attempt:expr) => {{
        let admin = client(&$zk.connect_string()).await;
        let mut $rng = Rng(seed());
        let mut dropped = 0;
        for _ in 0..ROUNDS {
            let blocker = if $rng.below(2) == 0 { $busy } else { None };
            match $attempt {
                Some(completed) => drop(completed),
                None => dropped += 1,
            }
            if let Some(g) = blocker {
                g.release().await.unwrap();
            }
        }
        assert!(dropped > 10, "too few drops exercised: {dropped}");
        for dir in $dirs {
            eventually(&format!("no node of ours under {dir}"), || async {
                nodes_owned_by(&admin, dir, $session).await.is_empty()
            })
            .await;
        }
    }};
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_and_write_locks() {
    let zk = standalone().await;
    let blocker = InterProcessReadWriteLock::new(&session(&zk.connect_string()).await, "/c/rw").unwrap();
    let c = session(&zk.connect_string()).await;
    let lock = InterProcessReadWriteLock::new(&c, "/c/rw").unwrap();
    fuzz!(
        zk,
        raw(&c).session_id().0,
        ["/c/rw"],
        busy = blocker.write().await.ok(),
        attempt(rng) = {
            if rng.below(2) == 0 {
                drop_randomly(&mut rng, || lock.write()).await
            } else {
                drop_randomly(&mut rng, || lock.read()).await
            }
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn semaphore_leases() {
    let zk = standalone().await;
    let blocker = InterProcessSemaphore::new(&session(&zk.connect_string()).await, "/c/sem", 3).unwrap();
    let c = session(&zk.connect_string()).await;
    let sem = InterProcessSemaphore::new(&c, "/c/sem", 3).unwrap();
    fuzz!(
        zk,
        raw(&c).session_id().0,
        ["/c/sem"],
        busy = blocker.acquire_many(2).await.ok(),
        attempt(rng) = {
            let n = 1 + rng.below(3) as u32;
            drop_randomly(&mut rng, || sem.acquire_many(n)).await
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn semaphore_mutex() {
    let zk = standalone().await;
    let blocker = InterProcessSemaphoreMutex::new(&session(&zk.connect_string()).await, "/c/smutex").unwrap();
    let c = session(&zk.connect_string()).await;
    let lock = InterProcessSemaphoreMutex::new(&c, "/c/smutex").unwrap();
    fuzz!(
        zk,
        raw(&c).session_id().0,
        ["/c/smutex"],
        busy = blocker.acquire().await.ok(),
        attempt(rng) = { drop_randomly(&mut rng, || lock.acquire()).await }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn multi_lock() {
    let zk = standalone().await;
    let blocker = InterProcessMutex::new(&session(&zk.connect_string()).await, "/c/m2").unwrap();
    let c = session(&zk.connect_string()).await;
    let multi = InterProcessMultiLock::new(&c, &["/c/m1", "/c/m2", "/c/m3"]).unwrap();
    fuzz!(
        zk,
        raw(&c).session_id().0,
        ["/c/m1", "/c/m2", "/c/m3"],
        busy = blocker.acquire().await.ok(),
        attempt(rng) = { drop_randomly(&mut rng, || multi.acquire()).await }
    );
}

/// A leading latch, released by closing it.
struct Incumbent(LeaderLatch);

impl Incumbent {
    async fn release(self) -> zk_recipes::Result<()> {
        self.0.close().await;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_latch_dropped_mid_election() {
    let zk = standalone().await;
    let c = session(&zk.connect_string()).await;
    let other = session(&zk.connect_string()).await;
    // Half the time another latch leads, so ours is queued when dropped.
    fuzz!(
        zk,
        raw(&c).session_id().0,
        ["/c/latch"],
        busy = {
            let incumbent = LeaderLatch::with_options(
                &other,
                "/c/latch",
                zk_recipes::LatchOptions::new().participant_id("incumbent"),
            )
            .unwrap();
            incumbent.start().unwrap();
            within("incumbent leads", incumbent.await_leadership()).await.ok().map(|_| Incumbent(incumbent))
        },
        attempt(rng) = {
            let latch = LeaderLatch::with_options(
                &c,
                "/c/latch",
                zk_recipes::LatchOptions::new().participant_id("ours"),
            )
            .unwrap();
            latch.start().unwrap();
            drop_randomly(&mut rng, || latch.await_leadership()).await
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_selector_dropped_mid_election() {
    let zk = standalone().await;
    let c = session(&zk.connect_string()).await;
    // A selector queues on Curator's lock names: a mutex holder makes it wait.
    let incumbent = InterProcessMutex::new(&session(&zk.connect_string()).await, "/c/selector").unwrap();
    fuzz!(
        zk,
        raw(&c).session_id().0,
        ["/c/selector"],
        busy = incumbent.acquire().await.ok(),
        attempt(rng) = {
            let selector = LeaderSelector::with_options(
                &c,
                "/c/selector",
                SelectorOptions::new().participant_id("ours"),
            )
            .unwrap();
            selector.start(|ctx| async move { ctx.stopped().await }).unwrap();
            drop_randomly(&mut rng, || selector.await_leadership()).await
        }
    );
}
