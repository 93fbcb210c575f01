//! Helpers shared by the integration tests. Every test talks to real ZooKeeper started by
//! `zk-testcluster`.
#![allow(dead_code)]

pub mod peers;
pub mod queued;

use std::future::Future;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use zk_recipes::zookeeper_client::{Acls, Client, CreateMode, SessionState};
use zk_recipes::{ConnectionState, Session};
use zk_testcluster::{FaultProxy, ZkCluster};

/// A guard against hangs, not a speed assertion: every awaited event gets this much.
pub const PATIENCE: Duration = Duration::from_secs(60);

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

pub async fn standalone() -> ZkCluster {
    init_tracing();
    ZkCluster::standalone().await.expect("start ZooKeeper")
}

pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, fut).await.unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// A [`Session`] with a 20 s session timeout: what recipes under test are built from.
pub async fn session(connect: &str) -> Session {
    session_with_timeout(connect, Duration::from_secs(20)).await
}

/// A [`Session`] with the given session timeout (the server clamps it to its bounds).
pub async fn session_with_timeout(connect: &str, session_timeout: Duration) -> Session {
    within("connect a session", Session::connect(connect, session_timeout)).await.expect("connect a session")
}

/// A raw client (20 s session timeout), for administration: reading and writing nodes the way
/// an operator or another process would, independently of any [`Session`] under test.
pub async fn client(connect: &str) -> Client {
    client_with_timeout(connect, Duration::from_secs(20)).await
}

/// A raw client with the given session timeout.
pub async fn client_with_timeout(connect: &str, session_timeout: Duration) -> Client {
    within("connect a raw client", Client::connector().with_session_timeout(session_timeout).connect(connect))
        .await
        .expect("connect a raw client")
}

/// Waits until `session` reports `want` (its latest state; intermediate states may be skipped).
/// Returns the generation it was reported with.
pub async fn wait_session_state(session: &Session, want: ConnectionState) -> u64 {
    let mut states = session.states();
    within(&format!("session state {want:?}"), async {
        states.wait_for(|s| s.state == want).await.map(|s| s.generation).expect("session state channel")
    })
    .await
}

/// Waits until `session` is connected on a generation after `generation` (a new session after
/// an expiry); returns the new generation.
pub async fn wait_new_generation(session: &Session, generation: u64) -> u64 {
    let mut states = session.states();
    within(&format!("a session generation after {generation}"), async {
        states
            .wait_for(|s| s.generation > generation && s.state.is_connected())
            .await
            .map(|s| s.generation)
            .expect("session state channel")
    })
    .await
}

/// The current raw client of `session` (its id is the owner of the nodes it creates).
pub fn raw(session: &Session) -> Client {
    session.client().expect("the session has a current client")
}

pub async fn wait_state(client: &Client, want: SessionState) {
    let mut watcher = client.state_watcher();
    within(&format!("session state {want:?}"), async {
        let mut state = watcher.state();
        while state != want {
            state = watcher.changed().await;
        }
    })
    .await
}

/// Polls `cond` until it holds. For conditions on *another* party's state that has no event we
/// can subscribe to (a node count on the server, say); never a stand-in for an event of ours.
pub async fn eventually<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    within(what, async {
        while !cond().await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// Waits until a session other than `node`'s owner watches `node` on the server (node 0's
/// `wchp`): the session that set the watch has sent every request before it. (The owner
/// watches its own node: that watch says nothing of the waiters.)
pub async fn until_watched(zk: &ZkCluster, what: &str, node: &str) {
    let admin = client(&zk.connect_string()).await;
    let owner = match admin.check_stat(node).await {
        Ok(Some(stat)) => stat.ephemeral_owner,
        other => panic!("{what}: no node {node} to watch: {other:?}"),
    };
    eventually(what, || async {
        zk.four_letter(0, "wchp").await.is_ok_and(|listing| watchers(&listing, node).any(|s| s != owner))
    })
    .await;
}

/// The sessions a `wchp` listing says watch `path`: its line is followed by one indented
/// `0x…` session id per watcher.
pub fn watchers<'a>(listing: &'a str, path: &str) -> impl Iterator<Item = i64> + 'a {
    let mut lines = listing.lines();
    let found = lines.by_ref().any(|line| line.trim_end() == path);
    lines.take_while(move |line| found && line.starts_with(char::is_whitespace)).filter_map(|line| {
        u64::from_str_radix(line.trim().trim_start_matches("0x"), 16).ok().map(|id| id as i64)
    })
}

/// A round trip on `session`'s own connection: ZooKeeper processes a session's requests in
/// order, so every request the session sent before (a watch sent behind a create, never waited
/// for) has been processed once this returns.
pub async fn sync_session(session: &Session) {
    let _ = raw(session).check_stat("/").await;
}

/// Whether `session` has a data watch on `path` on the server (node 0's `wchp`, which lists data
/// watches only: a child watch on a parent does not show).
pub async fn has_data_watch(zk: &ZkCluster, path: &str, session: i64) -> bool {
    let listing = zk.four_letter(0, "wchp").await.expect("wchp");
    let found = watchers(&listing, path).any(|s| s == session);
    found
}

/// The children of `path` (empty if it does not exist).
pub async fn children(client: &Client, path: &str) -> Vec<String> {
    match client.list_children(path).await {
        Ok(c) => c,
        Err(zk_recipes::zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => panic!("list {path}: {e}"),
    }
}

pub async fn create_persistent(client: &Client, path: &str, data: &[u8]) {
    client.mkdir(path, &CreateMode::Persistent.with_acls(Acls::anyone_all())).await.expect("mkdir");
    client.set_data(path, data, None).await.expect("set");
}

/// Detects two holders at once inside one process.
#[derive(Default, Debug)]
pub struct Overlap {
    holders: AtomicUsize,
    violations: AtomicUsize,
    entries: AtomicUsize,
    max: AtomicUsize,
}

impl Overlap {
    pub fn enter(&self) {
        let now = self.holders.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
        self.entries.fetch_add(1, Ordering::SeqCst);
        if now > 1 {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
    }

    pub fn exit(&self) {
        self.holders.fetch_sub(1, Ordering::SeqCst);
    }

    pub fn violations(&self) -> usize {
        self.violations.load(Ordering::SeqCst)
    }

    pub fn entries(&self) -> usize {
        self.entries.load(Ordering::SeqCst)
    }

    pub fn max_concurrent(&self) -> usize {
        self.max.load(Ordering::SeqCst)
    }
}

/// Read-modify-write of a counter node, deliberately unprotected by anything but the lock, with
/// a yield in between to widen the window for lost updates.
pub async fn bump_counter(client: &Client, path: &str) {
    let (data, _) = client.get_data(path).await.expect("read counter");
    let n: u64 = String::from_utf8(data).expect("utf8").parse().expect("number");
    tokio::task::yield_now().await;
    client.set_data(path, (n + 1).to_string().as_bytes(), None).await.expect("write counter");
}

pub async fn read_counter(client: &Client, path: &str) -> u64 {
    let (data, _) = client.get_data(path).await.expect("read counter");
    String::from_utf8(data).expect("utf8").parse().expect("number")
}

/// xorshift64*: small, seeded, replayable.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub fn seed() -> u64 {
    std::env::var("ZK_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_2026)
}

/// Polls `fut` at most `polls` times (each poll after a wake-up), then drops it. A future that
/// waits for an event which only comes after the drop (the holder's release) is dropped after
/// `bound` instead.
pub async fn poll_n_times<F: Future>(fut: F, polls: u64, bound: Duration) -> Option<F::Output> {
    tokio::time::timeout(bound, poll_limited(fut, polls)).await.ok().flatten()
}

async fn poll_limited<F: Future>(fut: F, polls: u64) -> Option<F::Output> {
    let mut fut = pin!(fut);
    let mut left = polls;
    std::future::poll_fn(move |cx| {
        if left == 0 {
            return Poll::Ready(None);
        }
        left -= 1;
        match fut.as_mut().poll(cx) {
            Poll::Ready(out) => Poll::Ready(Some(out)),
            Poll::Pending if left == 0 => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// Drives one cancellation round: `acquire()` is dropped at a random point (after a few polls,
/// or after a random time), or completes and its output is handed to `done`.
pub async fn drop_randomly<F, Fut, T>(rng: &mut Rng, mut acquire: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    if rng.below(2) == 0 {
        poll_n_times(acquire(), 1 + rng.below(6), Duration::from_millis(5 + rng.below(20))).await
    } else {
        tokio::time::timeout(Duration::from_micros(rng.below(4000)), acquire()).await.ok()
    }
}

/// Nodes under `path` owned by `session`.
pub async fn nodes_owned_by(admin: &Client, path: &str, session: i64) -> Vec<String> {
    let mut ours = Vec::new();
    for name in children(admin, path).await {
        if let Ok((_, stat)) = admin.get_data(&format!("{path}/{name}")).await {
            if stat.ephemeral_owner == session {
                ours.push(name);
            }
        }
    }
    ours
}

/// Waits (bounded) until `selector` leads in a term other than `first`; returns its token.
pub async fn leadership_after(selector: &zk_recipes::LeaderSelector, first: u64, what: &str) -> u64 {
    within(what, async {
        loop {
            let token = selector.await_leadership().await.unwrap();
            if token != first {
                return token;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
}

/// A peer process whose stdout lines arrive on a channel.
pub struct Peer {
    pub child: std::process::Child,
    pub lines: std::sync::mpsc::Receiver<String>,
}

impl Peer {
    pub fn spawn(mut cmd: std::process::Command) -> Peer {
        let mut child = cmd
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn peer");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(out)).map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Peer { child, lines }
    }

    /// The next line starting with `prefix` (others are skipped).
    pub async fn expect(&mut self, prefix: &str) -> String {
        let lines = &self.lines;
        within(&format!("peer line {prefix:?}"), async {
            loop {
                match lines.try_recv() {
                    Ok(line) if line.starts_with(prefix) => return line,
                    Ok(_) => {}
                    Err(std::sync::mpsc::TryRecvError::Empty) => {
                        tokio::time::sleep(Duration::from_millis(10)).await
                    }
                    Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                        panic!("peer exited before printing {prefix:?}")
                    }
                }
            }
        })
        .await
    }

    pub fn say(&mut self, word: &str) {
        let _ = std::io::Write::write_fmt(&mut *self.child.stdin.as_mut().unwrap(), format_args!("{word}\n"));
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub async fn wait_success(self) {
        let mut child = self.child;
        let status =
            within("peer exit", tokio::task::spawn_blocking(move || child.wait())).await.unwrap().unwrap();
        assert!(status.success(), "peer failed: {status}");
    }
}

/// An acquire run on a task of its own with its queue events (`acquire_with_events`), each with
/// the instant it arrived, on a channel.
pub struct Waiter {
    pub events: tokio::sync::mpsc::UnboundedReceiver<(std::time::Instant, zk_recipes::QueueEvent)>,
    pub seen: Vec<(std::time::Instant, zk_recipes::QueueEvent)>,
    pub task: tokio::task::JoinHandle<zk_recipes::Result<Option<zk_recipes::LockGuard>>>,
}

impl Waiter {
    fn spawn<F>(
        acquire: impl FnOnce(
            tokio::sync::mpsc::UnboundedSender<(std::time::Instant, zk_recipes::QueueEvent)>,
        ) -> F,
    ) -> Waiter
    where
        F: Future<Output = zk_recipes::Result<Option<zk_recipes::LockGuard>>> + Send + 'static,
    {
        let (tx, events) = tokio::sync::mpsc::unbounded_channel();
        Waiter { events, seen: Vec::new(), task: tokio::spawn(acquire(tx)) }
    }

    /// Acquires `lock`, waiting at most `timeout` when given.
    pub fn lock(lock: impl zk_recipes::Lock + 'static, timeout: Option<Duration>) -> Waiter {
        Waiter::spawn(|tx| async move {
            let mut report = move |event: &zk_recipes::QueueEvent| {
                let _ = tx.send((std::time::Instant::now(), event.clone()));
            };
            lock.acquire_with_events(timeout, &mut report).await
        })
    }

    /// Acquires `leases` leases of `semaphore`.
    pub fn leases(semaphore: zk_recipes::InterProcessSemaphore, leases: u32) -> Waiter {
        Waiter::spawn(|tx| async move {
            let mut report = move |event: &zk_recipes::QueueEvent| {
                let _ = tx.send((std::time::Instant::now(), event.clone()));
            };
            semaphore.acquire_with_events(leases, None, &mut report).await
        })
    }

    /// Waits for the first event that `want` accepts; returns it with its instant.
    pub async fn until(
        &mut self,
        what: &str,
        want: impl Fn(&zk_recipes::QueueEvent) -> bool,
    ) -> (std::time::Instant, zk_recipes::QueueEvent) {
        within(what, async {
            loop {
                let event = self.events.recv().await.expect("the acquire ended without the event");
                self.seen.push(event.clone());
                if want(&event.1) {
                    return event;
                }
            }
        })
        .await
    }

    pub async fn queued(&mut self) {
        self.until("queued", |e| matches!(e, zk_recipes::QueueEvent::Queued { .. })).await;
    }

    /// The next `LockDelay`: when it came, and the wait it announced.
    pub async fn lock_delay(&mut self) -> (std::time::Instant, Duration) {
        match self.until("the lock delay", |e| matches!(e, zk_recipes::QueueEvent::LockDelay { .. })).await {
            (at, zk_recipes::QueueEvent::LockDelay { wait, .. }) => (at, wait),
            _ => unreachable!(),
        }
    }

    /// What the acquire returned, once it returns; every event it reported is in `seen`.
    pub async fn result(&mut self) -> zk_recipes::Result<Option<zk_recipes::LockGuard>> {
        let result = within("the acquire", &mut self.task).await.unwrap();
        while let Ok(event) = self.events.try_recv() {
            self.seen.push(event);
        }
        result
    }

    /// The guard, once the acquire returns one.
    pub async fn guard(&mut self) -> zk_recipes::LockGuard {
        self.result().await.unwrap().expect("acquired")
    }

    pub fn events(&self) -> Vec<&zk_recipes::QueueEvent> {
        self.seen.iter().map(|(_, e)| e).collect()
    }

    /// The `LockDelay` events seen.
    pub fn delays(&self) -> Vec<&zk_recipes::QueueEvent> {
        self.events().into_iter().filter(|e| matches!(e, zk_recipes::QueueEvent::LockDelay { .. })).collect()
    }
}

/// docs/how-it-works.md, "A handoff on the notification alone", for a waiter whose session
/// guessed (a fresh path, an idle lock): `holder` takes `path`, `waiter` (connected through
/// `proxy`) queues behind it, and must enter on the holder's deletion without a request (the
/// proxy holds back everything it sends meanwhile). Its join's listing set a child watch, which
/// that deletion fires too; the waiter sets the data watch on its node as on any path
/// (asserted) and does not act on the child watch.
pub async fn enters_on_the_notification_alone(
    zk: &ZkCluster,
    proxy: &FaultProxy,
    (holder, waiter): (&Session, &Session),
    path: &str,
    round: usize,
) {
    let held = zk_recipes::InterProcessMutex::new(holder, path).unwrap().acquire().await.unwrap();
    let holder_node = held.node_path().to_string();
    let mutex = zk_recipes::InterProcessMutex::new(waiter, path).unwrap();
    let waiting = tokio::spawn({
        let mutex = mutex.clone();
        async move { mutex.acquire().await }
    });
    until_watched(zk, "the waiter to watch the holder's node", &holder_node).await;
    // A waiter sets the data watch on its node (sent before the one on the holder's), even
    // where its join's listing set a child watch: that one is not its own-node watch.
    let queue = mutex.participants().await.unwrap();
    let waiter_node = format!("{path}/{}", queue[1].node);
    assert!(has_data_watch(zk, &waiter_node, raw(waiter).session_id().0).await, "round {round}");
    proxy.hold_requests();
    held.release().await.unwrap();
    let entered = tokio::time::timeout(Duration::from_secs(5), waiting).await;
    proxy.heal();
    let guard = match entered {
        Ok(joined) => joined.unwrap().unwrap(),
        Err(_) => panic!("round {round}: the waiter did not enter on the notification alone"),
    };
    assert_eq!(guard.current_status(), zk_recipes::LockStatus::Held);
    guard.release().await.unwrap();
    mutex.settled().await;
}

/// One round of mutual exclusion on `path`: two tasks per session in `sessions` contend at once,
/// each holding while it makes a request; asserts no overlap, every task entered, and no node
/// left behind (`tests/fresh_paths_faults.rs`, `tests/idle_locks.rs`: sessions that guess).
pub async fn exclusion_round(sessions: &[Session], admin: &Client, path: &str, round: usize) {
    let overlap = std::sync::Arc::new(Overlap::default());
    let mut tasks = Vec::new();
    for s in sessions {
        for _ in 0..2 {
            let (mutex, overlap, c) =
                (zk_recipes::InterProcessMutex::new(s, path).unwrap(), overlap.clone(), raw(s));
            let path = path.to_string();
            tasks.push(tokio::spawn(async move {
                let guard = mutex.acquire().await.unwrap();
                overlap.enter();
                let _ = c.list_children(&path).await;
                assert_eq!(guard.current_status(), zk_recipes::LockStatus::Held);
                overlap.exit();
                guard.release().await.unwrap();
                mutex.settled().await;
            }));
        }
    }
    for task in tasks {
        within("a contender", task).await.unwrap();
    }
    assert_eq!(overlap.violations(), 0, "round {round}");
    assert_eq!(overlap.entries(), 2 * sessions.len());
    assert!(children(admin, path).await.is_empty(), "round {round}");
}

/// Whether the run's server (`ZK_VERSION`) answers a `multi`'s creates with their `Stat`
/// (ZOOKEEPER-4026: 3.7.2+, 3.8.2+, 3.9): where it does, a session's creates may go together.
pub fn multi_creates_answer_stat() -> bool {
    let (_, minor, patch) = zk_testcluster::ZkVersion::from_env().expect("ZK_VERSION").parts();
    match minor {
        7 | 8 => patch >= 2,
        m => m > 8,
    }
}

/// Teaches `s` that its joins meet missing parents (the session's parent hint), on fresh paths
/// under `base`: its next joins guess a fresh path (`tests/fresh_paths*.rs`).
pub async fn learn_fresh_paths(s: &Session, base: &str) {
    for i in 0..8 {
        let mutex = zk_recipes::InterProcessMutex::new(s, &format!("{base}/learn{i}")).unwrap();
        mutex.acquire().await.unwrap().release().await.unwrap();
    }
}

/// The binary of the example `name` beside the test binaries. `cargo test` builds every
/// example first; a filtered run (`cargo test --test X`) does not, so it is built here when
/// missing (not when present: building it here without the suite's features, `tls` among them,
/// would rebuild the library in the middle of the run). After changing the library, a filtered
/// run of a test that runs an example wants `cargo build --example NAME` first.
pub fn example_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let path = exe.parent().and_then(|deps| deps.parent()).expect("target dir").join("examples").join(name);
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let built =
            std::process::Command::new(cargo).args(["build", "--example", name]).status().expect("cargo");
        assert!(built.success(), "building the {name} example failed");
    }
    assert!(path.exists(), "{} is missing", path.display());
    path
}
