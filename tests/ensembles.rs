//! Ensembles that change under a live session: a server back at a new address under
//! the same name, every server replaced by `reconfig`, a `reconfig` after which the quorum is
//! lost. Each runs with a holder and a waiter live, and checks the chaos checker's properties:
//! no overlap, fenced writes accepted in token order, no node left, replicas converged
//! (`examples/chaos/convergence.rs`, reused).

mod common;
// The chaos run's replica check, on the servers that run.
#[allow(dead_code)]
#[path = "../examples/chaos/convergence.rs"]
mod convergence;

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{within, Overlap};
use zk_recipes::zookeeper_client::{Client, EnsembleUpdate};
use zk_recipes::{ConnectOptions, ConnectionState, InterProcessMutex, LockGuard, LockStatus, Session};
use zk_testcluster::{ClusterConfig, ZkCluster, ZkVersion};

/// What `convergence.rs` returns its errors as.
type Error = Box<dyn std::error::Error + Send + Sync>;

const LOCK: &str = "/ensembles/lock";
const REGISTER: &str = "/ensembles/register";

/// The tokens of the fenced writes the server accepted, in the order it accepted them (each
/// write is conditional on the register's version read just before).
#[derive(Default)]
struct Fenced(Mutex<Vec<u64>>);

impl Fenced {
    /// One fenced write of `guard`'s token to the register (read through `session`, whose
    /// guard it is); whether it was accepted.
    async fn write(&self, guard: &LockGuard, session: &Session) -> bool {
        let client = common::raw(session);
        let (_, stat) = within("read the register", client.get_data(REGISTER)).await.expect("register");
        let token = guard.fencing_token();
        let mut writer = guard.fenced_writer().expect("a fenced writer");
        writer.add_set_data(REGISTER, token.to_string().as_bytes(), Some(stat.version)).expect("set");
        let accepted = within("a fenced write", writer.commit()).await.is_ok();
        if accepted {
            self.0.lock().unwrap().push(token);
        }
        accepted
    }

    /// Every accepted write's token is at least the one before.
    fn check(&self) -> Vec<u64> {
        let tokens = self.0.lock().unwrap().clone();
        assert!(tokens.windows(2).all(|w| w[0] <= w[1]), "fenced writes accepted out of order: {tokens:?}");
        tokens
    }
}

/// The holder and waiter of one test, and what checks them.
struct Workload {
    overlap: Arc<Overlap>,
    fenced: Arc<Fenced>,
}

impl Workload {
    fn new() -> Workload {
        Workload { overlap: Arc::default(), fenced: Arc::default() }
    }

    /// `holder` takes the lock (and writes once, fenced); a waiter on `waiter` queues behind it
    /// and, once admitted, writes and releases. Returns the guard and the waiter's task, once
    /// the waiter is queued.
    async fn start(
        &self,
        holder: &Session,
        waiter: &Session,
        admin: &Client,
    ) -> (LockGuard, tokio::task::JoinHandle<()>) {
        within(
            "the register",
            admin.mkdir(
                REGISTER,
                &zk_recipes::zookeeper_client::CreateMode::Persistent
                    .with_acls(zk_recipes::zookeeper_client::Acls::anyone_all()),
            ),
        )
        .await
        .expect("create the register");
        let guard = within("the holder's acquire", InterProcessMutex::new(holder, LOCK).unwrap().acquire())
            .await
            .expect("acquire");
        self.overlap.enter();
        assert!(self.fenced.write(&guard, holder).await, "the holder's first fenced write");
        let (mutex, overlap, fenced, waiter) = (
            InterProcessMutex::new(waiter, LOCK).unwrap(),
            self.overlap.clone(),
            self.fenced.clone(),
            waiter.clone(),
        );
        let waiting = tokio::spawn(async move {
            let guard = mutex.acquire().await.expect("the waiter's acquire");
            overlap.enter();
            assert!(fenced.write(&guard, &waiter).await, "the waiter's fenced write");
            overlap.exit();
            guard.release().await.expect("the waiter's release");
        });
        common::eventually("the waiter queued", || async { common::children(admin, LOCK).await.len() == 2 })
            .await;
        (guard, waiting)
    }

    /// The holder writes once more (still the holder, as the server sees it) and releases;
    /// the waiter then takes its turn; no overlap, writes in order, no node left.
    async fn finish(
        &self,
        holder: &Session,
        guard: LockGuard,
        waiting: tokio::task::JoinHandle<()>,
        admin: &Client,
    ) {
        assert!(self.fenced.write(&guard, holder).await, "the holder's last fenced write");
        self.overlap.exit();
        within("the holder's release", guard.release()).await.expect("release");
        within("the waiter's turn", waiting).await.expect("the waiter");
        assert_eq!(self.overlap.violations(), 0, "two holders at once");
        assert_eq!(self.overlap.entries(), 2);
        assert_eq!(self.fenced.check().len(), 3);
        assert_eq!(common::children(admin, LOCK).await, Vec::<String>::new(), "a node left behind");
    }
}

/// The servers that run have the same tree (the chaos run's check).
async fn converged(zk: &ZkCluster) {
    let outcome = within(
        "the replicas' comparison",
        convergence::check(zk, &ConnectOptions::new(Duration::from_secs(10))),
    )
    .await;
    assert_eq!(convergence::print(&outcome), 0, "the replicas differ");
}

/// Waits for `state` among `events` (of generation `generation`).
async fn saw(
    events: &mut tokio::sync::broadcast::Receiver<zk_recipes::SessionStatus>,
    state: ConnectionState,
) {
    within(&format!("{state:?}"), async {
        loop {
            let status = events.recv().await.expect("the session's events");
            assert_eq!(status.generation, 1, "a new session: the old one was lost ({status:?})");
            if status.state == state {
                return;
            }
        }
    })
    .await
}

/// The connections server `i` serves (`cons`) include session `id`.
async fn serves(zk: &ZkCluster, i: usize, id: i64) -> bool {
    zk.four_letter(i, "cons").await.is_ok_and(|cons| cons.contains(&format!("sid=0x{id:x}")))
}

// --- A server moved to a new address under the same name -------------------------------------

/// The name the moved server goes by, in the test's own `/etc/hosts`.
const NAME: &str = "zk-moved.test";
/// Set in the child that runs the test in a mount namespace of its own: its `/etc/hosts`.
const HOSTS: &str = "ZK_ENSEMBLES_HOSTS";

/// The session's name for the server is resolved again at each connection attempt: when the
/// server comes back at another address, the session reconnects to it, keeps its lock, and
/// the waiter gets it after the release.
///
/// The name resolves through a copy of `/etc/hosts` bind-mounted over it in a mount namespace
/// of the test's own (`unshare -m`): the test runs itself again there, and rewrites that copy.
/// The machine's own `/etc/hosts` is never touched.
#[test]
fn a_server_back_at_a_new_address_under_the_same_name_is_found_again() {
    if let Ok(hosts) = std::env::var(HOSTS) {
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        return runtime.block_on(moved(std::path::PathBuf::from(hosts)));
    }
    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::copy("/etc/hosts", &hosts).expect("copy /etc/hosts");
    let me = std::env::current_exe().unwrap();
    let name = "a_server_back_at_a_new_address_under_the_same_name_is_found_again";
    let script =
        format!("mount --bind \"$0\" /etc/hosts && exec \"$1\" --exact {name} --nocapture --test-threads=1");
    let out = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .arg(&hosts)
        .arg(&me)
        .env(HOSTS, &hosts)
        .output()
        .expect("run unshare (util-linux)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the test in its namespace:\n{stdout}\n{stderr}"
    );
}

/// Points [`NAME`] at `address` in the namespace's hosts file (written in place: the bind mount
/// holds the file, not its name).
fn point(hosts: &std::path::Path, original: &str, address: Ipv4Addr) {
    std::fs::write(hosts, format!("{original}\n{address} {NAME}\n")).expect("write the hosts file");
}

async fn moved(hosts: std::path::PathBuf) {
    common::init_tracing();
    let original = std::fs::read_to_string(&hosts).unwrap();
    let mut zk = ZkCluster::ensemble(3).await.expect("start an ensemble");
    let (first, second) = (Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::new(127, 0, 0, 3));
    point(&hosts, &original, first);
    zk.move_client_address(0, first).await.expect("node 0 at its first address");
    let port = zk.client_addr(0).unwrap().port();
    let holder = common::session(&format!("{NAME}:{port}")).await;
    let others = format!("{},{}", zk.client_addr(1).unwrap(), zk.client_addr(2).unwrap());
    let waiter = common::session(&others).await;
    let admin = common::client(&others).await;
    let work = Workload::new();
    let (guard, waiting) = work.start(&holder, &waiter, &admin).await;
    let id = common::raw(&holder).session_id().0;
    assert!(serves(&zk, 0, id).await, "the holder is connected to node 0");

    let mut events = holder.events();
    point(&hosts, &original, second);
    zk.move_client_address(0, second).await.expect("node 0 moved");
    saw(&mut events, ConnectionState::Suspended).await;
    saw(&mut events, ConnectionState::Reconnected).await;
    assert!(serves(&zk, 0, id).await, "the holder reconnected to node 0 at its new address");
    assert_eq!(guard.current_status(), LockStatus::Held);
    work.finish(&holder, guard, waiting, &admin).await;
    converged(&zk).await;
}

// --- Every server replaced by reconfig ----------------------------------------------------------

/// A session that follows the ensemble (20 s timeout), to `connect`.
async fn following(connect: &str) -> Session {
    let options = ConnectOptions::new(Duration::from_secs(20)).follow_ensemble(true);
    within("connect a following session", Session::connect_with(connect, &options)).await.expect("connect")
}

/// One `reconfig` (add `add`, remove member `remove`), sent again after a connection loss
/// unless the configuration shows it applied (the leader may step down with the change).
/// A connect string the client cannot read is refused at once, as without following (the
/// client crate itself only sees the relay's address).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_following_session_refuses_an_unreadable_connect_string_at_once() {
    let options = ConnectOptions::new(Duration::from_secs(20)).follow_ensemble(true);
    for bad in ["", "127.0.0.1:x", "127.0.0.1:2181,:5"] {
        match within("a refusal", Session::connect_with(bad, &options)).await {
            Err(zk_recipes::Error::Connect { reason, probes, .. }) => {
                assert_eq!(reason, zk_recipes::ConnectFailure::BadConnectString, "{bad:?}");
                assert!(probes.is_empty(), "{bad:?}");
            }
            other => panic!("{bad:?} was not refused: {other:?}"),
        }
    }
}

async fn reconfig(admin: &Client, add: Option<String>, remove: Option<u64>) {
    let add: Vec<String> = add.into_iter().collect();
    let remove: Vec<String> = remove.into_iter().map(|id| id.to_string()).collect();
    let applied = |config: &str| {
        add.iter().all(|spec| config.lines().any(|l| l == spec))
            && remove.iter().all(|id| !config.lines().any(|l| l.starts_with(&format!("server.{id}="))))
    };
    within("reconfig", async {
        loop {
            let (joinings, leavings) = (add.iter().map(String::as_str), remove.iter().map(String::as_str));
            let update = EnsembleUpdate::Incremental { joinings, leavings };
            match admin.update_ensemble(update, None).await {
                Ok(_) => return,
                Err(zk_recipes::zookeeper_client::Error::ConnectionLoss) => {}
                Err(e) => panic!("reconfig: {e}"),
            }
            if let Ok((config, _)) = admin.get_config().await {
                if applied(&String::from_utf8_lossy(&config)) {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
}

/// Starts `n` new servers and adds each to the ensemble by `reconfig` (`admin`'s), one at a
/// time; returns their indexes.
async fn add_members(zk: &mut ZkCluster, admin: &Client, n: usize) -> Vec<usize> {
    let mut added = Vec::new();
    for _ in 0..n {
        let i = zk.add_member().await.expect("start a new server");
        reconfig(admin, Some(zk.member_spec(i).unwrap()), None).await;
        added.push(i);
    }
    added
}

/// The client addresses of nodes `nodes`, as a connect string.
fn connect_of(zk: &ZkCluster, nodes: impl IntoIterator<Item = usize>) -> String {
    nodes.into_iter().map(|i| zk.client_addr(i).unwrap().to_string()).collect::<Vec<_>>().join(",")
}

/// Three members added, then the three original ones removed and stopped, one at a time, while
/// a following session holds a lock and another waits: the holder keeps it (same session), its
/// connections follow the configuration, and with only new servers left it still reconnects
/// (its server restarted), renews its window, writes fenced and releases; the waiter follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_following_session_keeps_its_lock_while_reconfig_replaces_every_server() {
    common::init_tracing();
    let config = ClusterConfig { nodes: 3, reconfig: true, ..ClusterConfig::default() };
    let mut zk = ZkCluster::start(config).await.expect("start a reconfigurable ensemble");
    let originals = zk.connect_string();
    let holder = following(&originals).await;
    let waiter = following(&originals).await;
    let admin = common::client(&originals).await;
    let work = Workload::new();
    let (guard, waiting) = work.start(&holder, &waiter, &admin).await;
    let id = common::raw(&holder).session_id().0;
    let mut events = holder.events();

    let added = add_members(&mut zk, &admin, 3).await;
    common::eventually("the holder follows the six servers", || async { holder.servers().len() == 6 }).await;
    let admin = common::client(&connect_of(&zk, added.clone())).await;
    for i in 0..3 {
        reconfig(&admin, None, Some(zk.member_id(i).unwrap())).await;
        zk.remove_member(i).await.expect("stop a removed server");
    }
    let new_servers: Vec<String> = added.iter().map(|&i| zk.client_addr(i).unwrap().to_string()).collect();
    common::eventually("the holder follows the new servers", || async { holder.servers() == new_servers })
        .await;
    within("the holder connected", holder.connected()).await.expect("connected");
    assert_eq!((holder.generation(), guard.current_status()), (1, LockStatus::Held));

    // It still reconnects: the new server it is on restarts.
    let mut on = None;
    for &i in &added {
        if serves(&zk, i, id).await {
            on = Some(i);
        }
    }
    let on = on.expect("the holder is connected to a new server");
    while events.try_recv().is_ok() {}
    let restarted = Instant::now();
    zk.restart(on).await.expect("restart the holder's server");
    saw(&mut events, ConnectionState::Suspended).await;
    saw(&mut events, ConnectionState::Reconnected).await;
    // It renews: the window moves on past the restart.
    let renewed = holder.contacts();
    within("a contact after the restart", async {
        let mut renewed = renewed;
        renewed.wait_for(|c| c.is_some_and(|c| c > restarted)).await.expect("contacts");
    })
    .await;
    assert_eq!(guard.current_status(), LockStatus::Held);
    work.finish(&holder, guard, waiting, &admin).await;
    converged(&zk).await;
}

// --- A reconfig after which the quorum is lost -------------------------------------------------

/// Two members added (five voters: three make a quorum), then both stopped with one of the
/// original three: the old three alone would have had a quorum, the new configuration does not.
/// The holder's session is `Suspended`, and its hold is never `Held` past its safe window;
/// once the servers are back it carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconfig_that_loses_the_quorum_suspends_and_is_never_held_past_the_window() {
    common::init_tracing();
    let config = ClusterConfig { nodes: 3, reconfig: true, ..ClusterConfig::default() };
    let mut zk = ZkCluster::start(config).await.expect("start a reconfigurable ensemble");
    let originals = zk.connect_string();
    let holder = following(&originals).await;
    let waiter = following(&originals).await;
    let admin = common::client(&originals).await;
    let work = Workload::new();
    let (guard, waiting) = work.start(&holder, &waiter, &admin).await;
    add_members(&mut zk, &admin, 2).await;
    common::eventually("the holder follows the five servers", || async { holder.servers().len() == 5 }).await;
    let mut events = holder.events();

    for i in [3, 4, 0] {
        zk.stop(i).await.expect("stop a server");
    }
    saw(&mut events, ConnectionState::Suspended).await;
    // Sampled until well past the window: whenever the status reads `Held`, the window (read
    // after it: it only moves forward) had not passed when the read began.
    let sampling = within("the window's end", async {
        loop {
            let began = Instant::now();
            let status = guard.current_status();
            let window = guard.safe_until();
            if status == LockStatus::Held {
                assert!(window.is_some_and(|w| w >= began), "Held past the safe window");
            }
            if window.is_none_or(|w| Instant::now() > w + Duration::from_millis(500)) {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    assert_ne!(sampling.await, LockStatus::Held, "Held with the window passed");
    assert_ne!(guard.current_status(), LockStatus::Held, "Held with the window passed");

    // One server back: three of five, a quorum again, well within the session's timeout.
    zk.restart(0).await.expect("restart a server");
    saw(&mut events, ConnectionState::Reconnected).await;
    within("Held again", async {
        let mut status = guard.status();
        status.wait_for(|s| *s == LockStatus::Held).await.expect("status");
    })
    .await;
    work.finish(&holder, guard, waiting, &admin).await;
    converged(&zk).await;
}

// --- A rolling upgrade ----------------------------------------------------------------------------

/// The newest 3.9, the rolling upgrades' target: `ZK_UPGRADE_TO`, which `scripts/test` sets to
/// what Debian unstable has (`scripts/ensure-zookeeper-versions sid`: 3.9.6 when written), or
/// 3.9.6 when it is unset.
fn newest_3_9() -> ZkVersion {
    match std::env::var("ZK_UPGRADE_TO") {
        Ok(v) if !v.trim().is_empty() => v.parse().expect("ZK_UPGRADE_TO is a version such as 3.9.6"),
        _ => ZkVersion::V3_9_6,
    }
}

/// A three-server ensemble upgraded from 3.8.0 (Debian 12's) to the newest 3.9 ([`newest_3_9`]), one
/// server at a time, the followers first and the leader last, each back and the quorum led
/// before the next goes down, while a session holds a lock and another waits: the holder keeps
/// it (the same session, moved from server to server by the restarts), writes fenced and
/// releases; the waiter follows; the upgraded replicas agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_upgrade_from_3_8_to_3_9_keeps_the_lock_and_the_waiter() {
    common::init_tracing();
    let (from, to) = (ZkVersion::V3_8_0, newest_3_9());
    let config = ClusterConfig { nodes: 3, ..ClusterConfig::default() }.version(from);
    let mut zk = ZkCluster::start(config).await.expect("start a 3.8.0 ensemble");
    let connect = zk.connect_string();
    let holder = common::session(&connect).await;
    let waiter = common::session(&connect).await;
    let admin = common::client(&connect).await;
    let work = Workload::new();
    let (guard, waiting) = work.start(&holder, &waiter, &admin).await;

    let leader = zk.wait_for_leader().await.expect("a leader");
    let order: Vec<usize> = (0..3).filter(|&i| i != leader).chain([leader]).collect();
    for i in order {
        zk.restart_as(i, to).await.expect("restart a server as the new version");
        zk.wait_for_leader().await.expect("a leader after the step");
        assert_eq!(zk.server_version(i).await.expect("srvr"), to);
        within("the holder connected", holder.connected()).await.expect("connected");
        assert_eq!(holder.generation(), 1, "the holder's session was lost");
    }
    for i in 0..3 {
        assert_eq!(zk.server_version(i).await.expect("srvr"), to);
    }
    within("the holder connected", holder.connected()).await.expect("connected");
    assert_eq!((holder.generation(), guard.current_status()), (1, LockStatus::Held));
    work.finish(&holder, guard, waiting, &admin).await;
    converged(&zk).await;
}

/// The chaos run's lock-set phase (Jepsen's lock-set against ZooKeeper, PostgreSQL and Redis,
/// fenced and unfenced, worker processes paused between read and write) across a rolling
/// upgrade from 3.8.0 to the newest 3.9 (`--faults RollingUpgrade`): the run's checker finds no violation,
/// so no acknowledged add of a fenced set is lost, and the replicas converge.
#[test]
fn the_lock_set_workload_loses_no_acknowledged_add_across_a_rolling_upgrade() {
    let args = [
        "--phases",
        "lockset",
        "--seconds",
        "12",
        "--seed",
        "47",
        "--faults",
        "RollingUpgrade",
        "--every-kind",
    ];
    let to = newest_3_9();
    let out = std::process::Command::new(common::example_binary("chaos"))
        .args(args)
        .env("ZK_VERSION", "3.8.0")
        .env("ZK_UPGRADE_TO", to.to_string())
        .output()
        .expect("run the chaos example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let upgraded = stderr
        .lines()
        .filter(|l| l.contains("RollingUpgrade:") && l.contains(&format!("3.8.0 -> {to}")))
        .count();
    assert!(
        out.status.success() && stdout.contains("violations: 0") && upgraded >= 1,
        "the chaos run across the upgrade:\n{stdout}\n{stderr}"
    );
    // Jepsen's set-full, per fenced set: every acknowledged add in the final read.
    let fenced: Vec<&str> = stdout
        .lines()
        .filter(|l| l.trim_start().split(' ').next().is_some_and(|v| v.ends_with("-fenced")))
        .collect();
    assert_eq!(fenced.len(), 3, "zk, pg and redis fenced sets:\n{stdout}");
    for line in fenced {
        println!("{line}");
        assert!(line.contains(" acknowledged, 0 lost"), "an acknowledged add lost: {line}");
    }
    assert!(stdout.contains("convergence: every server has the same"), "{stdout}");
}

/// A following session keeps its chroot and its credentials through the relay, on its first
/// connection and after it moved to another server: its nodes land under the chroot, and a
/// create with `Acls::creator_all()` (which the server refuses to a connection without
/// credentials, even with `skipACL`) works before and after the move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_following_session_keeps_its_chroot_and_credentials_across_a_move() {
    use zk_recipes::zookeeper_client::{Acls, CreateMode};
    common::init_tracing();
    let config = ClusterConfig { nodes: 3, reconfig: true, ..ClusterConfig::default() };
    let mut zk = ZkCluster::start(config).await.expect("start a reconfigurable ensemble");
    let options = ConnectOptions::new(Duration::from_secs(20))
        .follow_ensemble(true)
        .create_chroot(true)
        .auth("digest", b"ensembles:secret");
    let session = within("connect", Session::connect_with(&format!("{}/app", zk.connect_string()), &options))
        .await
        .expect("connect");
    common::eventually("the configuration followed", || async { session.servers().len() == 3 }).await;
    let mine = CreateMode::Persistent.with_acls(Acls::creator_all());
    let admin = common::client(&zk.connect_string()).await;
    assert!(
        within("a stranger's create", admin.create("/theirs", b"x", &mine)).await.is_err(),
        "a connection without credentials created a creator-only node"
    );
    within("create", common::raw(&session).create("/mine", b"x", &mine))
        .await
        .expect("create with credentials");
    // Another session reads our write once its server has caught up with the leader's.
    within("sync", admin.sync("/app")).await.expect("sync");
    assert!(
        within("check", admin.check_stat("/app/mine")).await.expect("check").is_some(),
        "not under the chroot"
    );

    let id = common::raw(&session).session_id().0;
    let mut on = None;
    for i in 0..3 {
        if serves(&zk, i, id).await {
            on = Some(i);
        }
    }
    let mut events = session.events();
    zk.restart(on.expect("the session's server")).await.expect("restart its server");
    saw(&mut events, ConnectionState::Suspended).await;
    saw(&mut events, ConnectionState::Reconnected).await;
    within("create again", common::raw(&session).create("/mine2", b"y", &mine))
        .await
        .expect("create with credentials after the move");
    within("sync", admin.sync("/app")).await.expect("sync");
    assert!(
        within("check", admin.check_stat("/app/mine2")).await.expect("check").is_some(),
        "not under the chroot"
    );
}
