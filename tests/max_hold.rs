//! Hold limits: `LockOptions::max_hold` and the leader options' ends a hold
//! as if lost once it passes: status `Lost`, `lost()` resolves, the node deleted (the next
//! waiter enters), counted as a loss with cause `max_hold`; it never keeps a hold alive past
//! its session. This binary installs its own metrics recorder (process-wide): each test counts
//! under its own `role` label.

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use common::*;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tokio::sync::oneshot;
use zk_recipes::{
    Error, InterProcessMutex, LatchOptions, LeaderLatch, LeaderSelector, LockOptions, LockStatus,
    SelectorOptions, TermOutcome,
};

/// The recorder of this binary, installed by the first test that asks.
fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("the only recorder in this binary");
        snapshotter
    })
}

/// `zk_recipes_holds_lost_total{recipe, role, cause}` so far. A snapshot of the debugging
/// recorder resets every counter it reads, and this binary's tests take theirs concurrently: so
/// every snapshot is added to one running total, and each test reads its own labels from it.
fn losses(recipe: &str, role: &str, cause: &str) -> u64 {
    type Labels = Vec<(String, String)>;
    static TOTALS: OnceLock<std::sync::Mutex<std::collections::HashMap<Labels, u64>>> = OnceLock::new();
    let mut totals = TOTALS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    for (key, _, _, value) in snapshotter().snapshot().into_vec() {
        let key = key.key();
        if key.name() != "zk_recipes_holds_lost_total" {
            continue;
        }
        let mut labels: Labels = key.labels().map(|l| (l.key().to_string(), l.value().to_string())).collect();
        labels.sort();
        match value {
            DebugValue::Counter(n) => *totals.entry(labels).or_default() += n,
            other => panic!("not a counter: {other:?}"),
        }
    }
    let want: Labels = [("cause", cause), ("recipe", recipe), ("role", role)]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    totals.get(&want).copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mutex_hold_ends_at_its_limit_and_the_next_waiter_enters() {
    snapshotter();
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let holder = InterProcessMutex::with_options(
        &session(&zk.connect_string()).await,
        "/limits/mutex",
        LockOptions::new().metrics_role("limit").max_hold(Duration::from_millis(300)),
    )
    .unwrap();
    let waiter = InterProcessMutex::new(&session(&zk.connect_string()).await, "/limits/mutex").unwrap();

    let held = holder.acquire().await.unwrap();
    assert!(held.safe_until().is_some(), "a live hold has a safe window");
    // The task hands back the handle with the guard: the handle keeps its session open.
    let waiting = tokio::spawn(async move { waiter.acquire().await.map(|g| (g, waiter)) });
    eventually("waiter queued", || async { children(&admin, "/limits/mutex").await.len() == 2 }).await;

    // Nobody touches anything: the limit alone ends the hold.
    within("lost() at the limit", held.lost()).await;
    assert_eq!(held.current_status(), LockStatus::Lost);
    assert!(held.safe_until().is_none(), "a hold past its limit still reports a safe window");
    let (next, _waiter) = within("the next waiter acquires", waiting).await.unwrap().unwrap();
    assert!(next.fencing_token() > held.fencing_token());
    assert!(admin.check_stat(held.node_path()).await.unwrap().is_none(), "the holder's node is still there");
    // Counted once, by its own cause; the deletion it made is not a second loss.
    assert_eq!(losses("mutex", "limit", "max_hold"), 1);
    assert_eq!(losses("mutex", "limit", "node_deleted"), 0);
    // As after any loss: no re-entry, and the release reports it.
    assert!(matches!(held.reenter(), Err(Error::LockLost { .. })));
    assert!(matches!(held.release().await, Err(Error::LockLost { .. })));
    next.release().await.unwrap();
    assert!(children(&admin, "/limits/mutex").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hold_released_before_its_limit_is_not_ended_by_it() {
    snapshotter();
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let limited = LockOptions::new().metrics_role("early").max_hold(Duration::from_millis(300));
    let mutex =
        InterProcessMutex::with_options(&session(&zk.connect_string()).await, "/limits/early", limited)
            .unwrap();
    // Released at once: the release succeeds, and the timer stops with the hold.
    mutex.acquire().await.unwrap().release().await.unwrap();
    // A later hold through the same handle gets its own limit, counted from its own acquire.
    let again = mutex.acquire().await.unwrap();
    within("the second hold's limit", again.lost()).await;
    assert!(matches!(again.release().await, Err(Error::LockLost { .. })));
    assert_eq!(losses("mutex", "early", "max_hold"), 1);
    assert!(children(&admin, "/limits/early").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_limit_longer_than_the_session_keeps_nothing_alive() {
    snapshotter();
    let zk = standalone().await;
    let proxy = zk.proxy().unwrap();
    let holder_session = session_with_timeout(&proxy.connect_string(), Duration::from_secs(1)).await;
    let options = LockOptions::new().metrics_role("long").max_hold(Duration::from_secs(3600));
    let holder = InterProcessMutex::with_options(&holder_session, "/limits/long", options).unwrap();
    let waiter = InterProcessMutex::new(&session(&zk.connect_string()).await, "/limits/long").unwrap();

    let held = holder.acquire().await.unwrap();
    let waiting = tokio::spawn(async move { waiter.acquire().await.map(|g| (g, waiter)) });
    eventually("waiter queued", || async {
        holder.participants().await.map(|p| p.len() == 2).unwrap_or(false)
    })
    .await;
    // The server expires the holder's session long before the limit: the hold is lost then.
    proxy.blackhole();
    let (_next, _waiter) = within("waiter acquires", waiting).await.unwrap().unwrap();
    let mut status = held.status();
    within("holder sees Lost", status.wait_for(|s| *s == LockStatus::Lost)).await.unwrap();
    assert!(held.safe_until().is_none());
    assert_eq!(losses("mutex", "long", "session_expired"), 1);
    assert_eq!(losses("mutex", "long", "max_hold"), 0);
    proxy.heal();
    assert!(matches!(held.release().await, Err(Error::LockLost { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_selector_term_ends_at_its_limit_and_the_task_is_told_to_stop() {
    snapshotter();
    let zk = standalone().await;
    let s = session(&zk.connect_string()).await;
    let options = SelectorOptions::new().metrics_role("term").max_hold(Duration::from_millis(300));
    let selector = LeaderSelector::with_options(&s, "/limits/selector", options).unwrap();
    let mut terms = selector.terms();
    let (told, heard) = oneshot::channel();
    let told = std::sync::Mutex::new(Some(told));
    selector
        .start(move |ctx| {
            let told = told.lock().unwrap().take();
            async move {
                ctx.stopped().await;
                if let Some(told) = told {
                    let _ = told.send(ctx.safe_until());
                }
            }
        })
        .unwrap();
    let ended = within("the term's end", terms.recv()).await.unwrap();
    assert_eq!(ended.outcome, TermOutcome::Lost);
    assert!(!ended.aborted, "the task stopped when told, yet it was aborted");
    let safe_until = within("the task heard stopped()", heard).await.unwrap();
    assert!(safe_until.is_none(), "a term past its limit still reports a safe window");
    assert_eq!(losses("leader-selector", "term", "max_hold"), 1);
    selector.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_latch_loses_leadership_at_its_limit() {
    snapshotter();
    let zk = standalone().await;
    let s = session(&zk.connect_string()).await;
    let options = LatchOptions::new().metrics_role("latch").max_hold(Duration::from_millis(300));
    let latch = LeaderLatch::with_options(&s, "/limits/latch", options).unwrap();
    let mut leadership = latch.leadership();
    latch.start().unwrap();
    let first = within("leads", leadership.wait_for(|l| l.is_leader())).await.unwrap().fencing_token();
    // As after any loss, the latch rejoins the election: alone, it leads again, on a new node.
    let again = within("leads again after the limit", leadership.wait_for(|l| l.fencing_token() > first))
        .await
        .unwrap()
        .fencing_token();
    assert!(again > first);
    assert!(losses("leader-latch", "latch", "max_hold") >= 1);
    latch.close().await;
}

/// What two candidates' leadership bodies share: the overlap detector, and a count of terms
/// begun that a body's drop guard can block on (it runs in `Drop`, so it cannot await).
#[derive(Default)]
struct Terms {
    overlap: Overlap,
    begun: std::sync::Mutex<usize>,
    changed: std::sync::Condvar,
}

impl Terms {
    /// A term's task begins: counted, and whoever waits for the next term is woken.
    fn begin(self: &std::sync::Arc<Self>) -> InTerm {
        self.overlap.enter();
        let mut begun = self.begun.lock().unwrap();
        *begun += 1;
        self.changed.notify_all();
        InTerm { terms: self.clone(), mine: *begun }
    }
}

/// Leaves the term when the task's future is dropped (it is aborted: the body never returns).
/// Before it leaves, it holds the task's end back a while, waiting for another term to begin:
/// a selector that deleted its node before its task had stopped lets the next leader in right
/// then, while this one is still in its term, which the overlap detector counts. A selector
/// that stops its task first waits for this drop to finish: nobody can begin meanwhile, and the
/// wait runs out. (This bound is not a timing assertion: it only gives the wrong order room to
/// show, and on a correct selector it always runs out.)
struct InTerm {
    terms: std::sync::Arc<Terms>,
    mine: usize,
}

impl Drop for InTerm {
    fn drop(&mut self) {
        let begun = self.terms.begun.lock().unwrap();
        let room = Duration::from_secs(2);
        let _ = self.terms.changed.wait_timeout_while(begun, room, |begun| *begun == self.mine).unwrap();
        self.terms.overlap.exit();
    }
}

/// At a selector term's limit, the next leader must not begin while the old leader's task still
/// runs: the selector stops its task (aborted here: the body never returns, nor heeds
/// `stopped()`), and awaits its end, before its node goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_selector_term_at_its_limit_stops_its_task_before_the_next_leader_begins() {
    snapshotter();
    let zk = standalone().await;
    let terms = std::sync::Arc::new(Terms::default());
    let candidate = |id: &'static str| {
        let terms = terms.clone();
        let zk = zk.connect_string();
        async move {
            let s = session(&zk).await;
            let options = SelectorOptions::new()
                .participant_id(id)
                .metrics_role("overlap")
                .max_hold(Duration::from_millis(300));
            let selector = LeaderSelector::with_options(&s, "/limits/overlap", options).unwrap();
            selector
                .start(move |_ctx| {
                    let terms = terms.clone();
                    async move {
                        let _in_term = terms.begin();
                        std::future::pending::<()>().await;
                    }
                })
                .unwrap();
            selector
        }
    };
    let first = candidate("first").await;
    let mut first_terms = first.terms();
    within("the first candidate leads", first.await_leadership()).await.unwrap();
    let second = candidate("second").await;
    let second_leads = second.await_leadership();

    let ended = within("the first term's end", first_terms.recv()).await.unwrap();
    assert_eq!(ended.outcome, TermOutcome::Lost);
    assert!(ended.aborted, "the task never returns: only an abort ends it");
    within("the second candidate leads", second_leads).await.unwrap();
    // Leadership is granted before the task runs: its entry is an event to await.
    eventually("the second term's task to begin", || async { terms.overlap.entries() >= 2 }).await;
    assert_eq!(terms.overlap.entries(), 2);
    assert_eq!(
        terms.overlap.violations(),
        0,
        "the next leader's task began while the first leader's task still ran"
    );
    // The second term may have reached its own limit by now.
    assert!(losses("leader-selector", "overlap", "max_hold") >= 1);
    first.close().await;
    second.close().await;
}
