//! What waiting costs in memory, counted by a global allocator that tracks live heap bytes and
//! allocations: counts, never timings. One test in this binary, so that no other test allocates
//! meanwhile.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

use common::*;
use zk_recipes::{InterProcessMutex, Session};
use zk_testcluster::{ClusterConfig, ZkCluster};

/// The system allocator, counting the bytes it has handed out and not had back, and the
/// allocations it made.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call goes to the system allocator unchanged; only a counter is updated beside.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from this allocator with `layout`, as GlobalAlloc::realloc requires.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// How many waiters join at once. Each join lists the queue: a wave's listings are answered
/// back to back and wait in the server's memory (and then the client's) until read, so the
/// waves bound what the joins hold at once, whatever the machine's load; what is counted is
/// the waiters once all are queued.
const WAVE: usize = 512;

/// The server's count of watches (`wchs`: "Total watches:N").
async fn total_watches(zk: &ZkCluster) -> usize {
    let text = zk.four_letter(0, "wchs").await.expect("wchs");
    text.split("Total watches:")
        .nth(1)
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("a watch count in {text:?}"))
}

/// How many more waiters join at once behind a counted queue, their allocations counted.
/// Together, as many waiters of a session join: the first creates go alone, each with its own
/// listing, the rest in one `multi` or two, whose joins share one listing of the queue.
const JOINERS: usize = 16;

/// What `n` waiters queued on one lock cost: live heap bytes per waiter, and the allocations
/// per join of [`JOINERS`] more waiters joining behind them (their listings of the queue, as
/// the client reads them, among them).
struct Cost {
    bytes_per_waiter: isize,
    allocations_per_join: usize,
}

/// What `n` waiters, each with a handle of its own, cost while queued on one lock behind a
/// holder, on one session (see [`Cost`]); every waiter then acquires and releases in turn.
/// The waiters join in waves of [`WAVE`], each wave watching before the next joins.
async fn cost_of_waiters(zk: &ZkCluster, s: &Session, path: &str, n: usize) -> Cost {
    let holder = InterProcessMutex::new(s, path).unwrap().acquire().await.unwrap();
    let watches = total_watches(zk).await;
    let before = LIVE.load(Ordering::Relaxed);
    let mut waiters = Vec::with_capacity(n + JOINERS);
    let mut queued = 0;
    let mut allocations = 0;
    // The waves of `n`, then the joiners.
    for wave in (0..n).step_by(WAVE).map(|at| WAVE.min(n - at)).chain([JOINERS]) {
        if waiters.len() == n {
            queued = LIVE.load(Ordering::Relaxed);
        }
        let joining = ALLOCATIONS.load(Ordering::Relaxed);
        waiters.extend((0..wave).map(|_| {
            let mutex = InterProcessMutex::new(s, path).unwrap();
            tokio::spawn(async move { mutex.acquire().await?.release().await })
        }));
        // Once it has listed the queue and parsed it, each waiter watches the node ahead of it
        // and that node's tombstone's name (the waiter behind a node moves up on its tombstone
        // without listing): two watches a waiter, less the one path already watched when we
        // counted (one session: a path's watch counts once).
        let watching = watches + 2 * waiters.len() - 1;
        eventually("every waiter watching", || async { total_watches(zk).await >= watching }).await;
        allocations = ALLOCATIONS.load(Ordering::Relaxed) - joining;
    }
    holder.release().await.unwrap();
    for w in waiters {
        within("a waiter's turn", w).await.unwrap().unwrap();
    }
    Cost { bytes_per_waiter: (queued - before) / n as isize, allocations_per_join: allocations / JOINERS }
}

/// A waiter keeps only what it watches, not the listing it queued from (nor the queue parsed
/// from it): kept for as long as it waits, those would make `n` waiters in one process hold
/// memory in n² (100 KB per waiter with 1,024 waiters in the bench's scale scenario). So a
/// waiter's cost does not depend on how long the queue is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_costs_the_same_memory_however_long_the_queue() {
    const SHORT: usize = 100;
    // As the bench's largest scale scenario.
    const LONG: usize = 4096;
    // Not `common::standalone()`: it installs a tracing subscriber, whose captured output
    // would allocate during the count when RUST_LOG is set. A server with 1 GiB of heap, not
    // the harness's 256 MiB: the joins of 4,096 waiters on one connection have it answer
    // listings of up to 4,096 names back to back, which wait in its memory until the client
    // reads them (all 4,096 joining at once, 256 MiB ended the server with an
    // OutOfMemoryError, 512 MiB was enough on 3.9.3; in waves, it has room to spare).
    let zk = ZkCluster::start(ClusterConfig::default().heap_mb(1024)).await.expect("standalone");
    let s = session(&zk.connect_string()).await;
    // First a long queue, so that the session's buffers and maps have grown to the size a
    // long queue needs before anything is counted.
    cost_of_waiters(&zk, &s, "/locks/memory", LONG).await;
    let short = cost_of_waiters(&zk, &s, "/locks/memory", SHORT).await;
    let long = cost_of_waiters(&zk, &s, "/locks/memory", LONG).await;
    let (joins, joins_long) = (short.allocations_per_join, long.allocations_per_join);
    let (short, long) = (short.bytes_per_waiter, long.bytes_per_waiter);
    eprintln!("live heap per queued waiter: {short} B with {SHORT} waiters, {long} B with {LONG}");
    eprintln!("allocations per join behind them: {joins} behind {SHORT}, {joins_long} behind {LONG}");
    // A listing of N names is N strings as the client reads it, and a join reads the queue from
    // it without copying a name: a join costs N allocations more behind N waiters where it
    // lists alone (3.8.0: every create goes alone), and where creates go together the joins of
    // one `multi` share one listing, not copied either. (Each join copied every name, and each
    // copied a shared listing: 2N more.)
    let listings = if multi_creates_answer_stat() { LONG / 2 } else { LONG + LONG / 2 };
    assert!(
        joins_long < joins + listings,
        "{joins} allocations per join behind {SHORT} waiters, {joins_long} behind {LONG}: a join \
         copies the names of the queue it reads"
    );
    assert!(
        long < short + short / 4,
        "{short} bytes per waiter with {SHORT} waiters, {long} with {LONG}: a waiter's memory grows \
         with the queue"
    );
    // A queued waiter's live heap, counted by size (2026-11-27, 4,096 waiters): its task
    // 1,152 B (the acquire's future, about 1,030 B: room for its largest state, held for as
    // long as it waits), its boxed wait 576 B, its handle 304 B and the handle's parts (the
    // counters, the janitor, the local turn, the root check, the rule, the data, the path:
    // about 330 B), the own-node watch 192 B and the two watches ahead 168 B each, the
    // client's three watches 120 B each and the paths it keeps for two of them (69 and 33 B),
    // our node's path (88 B, shared with the session's record of our nodes), the name watched
    // (72 B, shared by the round and its watches), two lists of watches (32 B each): 3.6 KB,
    // the same with 100 waiters. It was 5.4 KB (5,442 B): the task 2,048 B (its future kept room for
    // states it was not in: the request, the span and the connection twice, a match's
    // answer held across a later await, a timer for a wait without a deadline), the boxed
    // wait 1,032 B (the arming of the watches kept inside the wait, a map of changes seen), the
    // metric labels 112 B, our node's path and name kept three times and the names watched
    // four times.
    assert!(long <= 4096, "{long} bytes per queued waiter (at most 4 KB)");
    s.close().await;
}
