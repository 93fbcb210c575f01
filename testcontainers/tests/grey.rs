//! Grey failures against real servers: a stalled disk, a full transaction-log disk, a leader
//! paused past the session timeout, one-way partitions (client paths and between servers), and
//! a follower that lags. Each test shows the fault's effect, so that a fault that does nothing
//! fails it.

mod common;

use common::{connect, within};

use std::time::Duration;

use zk_testcluster::{ClusterConfig, Mode, ZkCluster};
use zookeeper_client::{Acls, Client, CreateMode, SessionState};

const POLL: Duration = Duration::from_millis(50);

async fn direct(cluster: &ZkCluster, i: usize) -> Client {
    connect(&cluster.client_addr(i).expect("addr").to_string(), Duration::from_secs(10)).await
}

fn persistent() -> zookeeper_client::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

async fn create(client: &Client, path: &str) -> Result<(), zookeeper_client::Error> {
    client.create(path, b"grey", &persistent()).await.map(|_| ())
}

/// Polls until `done` holds (awaiting an event the servers show only through polling).
async fn await_true<F: std::future::Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    within(what, async {
        while !done().await {
            tokio::time::sleep(POLL).await;
        }
    })
    .await;
}

/// The `Zxid:` line of node `i`'s `srvr`.
async fn zxid(cluster: &ZkCluster, i: usize) -> Option<u64> {
    let srvr = cluster.four_letter(i, "srvr").await.ok()?;
    let hex = srvr.lines().find_map(|l| l.strip_prefix("Zxid: 0x"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

/// A 3-node ensemble whose links can be cut, its leader, one of its followers, and a client
/// connected to the leader.
async fn ensemble_with_a_follower() -> (ZkCluster, usize, usize, Client) {
    let cluster =
        ZkCluster::start(ClusterConfig { nodes: 3, ..ClusterConfig::default() }.partitionable(true))
            .await
            .expect("ensemble");
    let leader = cluster.wait_for_leader().await.expect("leader");
    let follower = a_follower(&cluster).await;
    let on_leader = direct(&cluster, leader).await;
    (cluster, leader, follower, on_leader)
}

/// A follower of the ensemble.
async fn a_follower(cluster: &ZkCluster) -> usize {
    for i in 0..cluster.len() {
        if cluster.mode(i).await == Some(Mode::Follower) {
            return i;
        }
    }
    panic!("no follower");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_disk_holds_writes_while_the_server_answers_pings() {
    let cluster = ZkCluster::start(ClusterConfig::default().disk_stall(true)).await.expect("standalone");
    let writer = direct(&cluster, 0).await;
    create(&writer, "/before").await.expect("a write before the stall");

    // Each fsync now takes 2 s; we watch the first second of it.
    cluster.stall_disk(0, Duration::from_secs(2)).expect("stall");
    let write = tokio::spawn({
        let writer = writer.clone();
        async move { create(&writer, "/during").await }
    });
    // The part of the stall we observe.
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The server answers pings and reports itself healthy...
    assert_eq!(cluster.four_letter(0, "ruok").await.expect("ruok"), "imok");
    assert_eq!(cluster.mode(0).await, Some(Mode::Standalone));
    // ...while the write has not completed: it waits for its log's fdatasync. (A standalone
    // server's reads queue behind a pending flush, so reads are not asked here.)
    if write.is_finished() {
        panic!("the write completed while the server's disk was stalled: {:?}", write.await);
    }
    cluster.unstall_disk(0).expect("unstall");
    within("the write after the stall", write).await.expect("join").expect("the write succeeds");
    assert!(writer.check_stat("/during").await.expect("stat").is_some());
    // Later writes are not slowed.
    within("a write after the stall", create(&writer, "/after")).await.expect("write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_log_disk_stops_the_server_writing_until_freed() {
    let mut cluster =
        ZkCluster::start(ClusterConfig::default().log_disk_mb(Some(16))).await.expect("standalone");
    let client = connect(&cluster.connect_string(), Duration::from_secs(4)).await;
    create(&client, "/before").await.expect("a write before the disk fills");

    let filled = cluster.fill_log_disk(0).expect("fill");
    assert!(filled > 0, "the filler took no space");
    // Writes until one fails or hangs: what is left of the log's last page goes first.
    let mut refused = None;
    for n in 0..2000 {
        let path = format!("/full-{n}");
        match tokio::time::timeout(Duration::from_secs(5), client.create(&path, &[7u8; 1024], &persistent()))
            .await
        {
            Ok(Ok(_)) => continue,
            Ok(Err(e)) => refused = Some(format!("{path}: {e:?}")),
            Err(_) => refused = Some(format!("{path}: no answer in 5 s")),
        }
        break;
    }
    let refused = refused.expect("every write succeeded on a full log disk");
    let exited = cluster.has_exited(0);
    eprintln!("full log disk: {refused}; server exited: {exited}");

    cluster.free_log_disk(0).expect("free");
    if exited || cluster.mode(0).await.is_none() {
        cluster.restart(0).await.expect("restart after freeing");
    }
    let after = connect(&cluster.connect_string(), Duration::from_secs(4)).await;
    within("a write after freeing", async {
        loop {
            match create(&after, "/after").await {
                Ok(()) | Err(zookeeper_client::Error::NodeExists) => return,
                Err(_) => tokio::time::sleep(POLL).await,
            }
        }
    })
    .await;
    assert!(after.check_stat("/before").await.expect("stat").is_some(), "a write before the fill was lost");

    // Teardown: the server is killed by PID and its log disk unmounted.
    let (pids, dir) = (cluster.pids(), cluster.dir().expect("dir").display().to_string());
    drop((client, after));
    drop(cluster);
    for pid in pids {
        assert!(!common::alive(pid), "server {pid} survived its cluster handle");
    }
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("mounts");
    assert!(!mounts.contains(&dir), "a log disk under {dir} is still mounted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_paused_past_the_session_timeout_loses_leadership_and_its_sessions() {
    let cluster = ZkCluster::ensemble(3).await.expect("ensemble");
    let old = cluster.wait_for_leader().await.expect("leader");
    // A 2 s session that knows only the leader, with an ephemeral node that shows its life.
    let on_leader =
        connect(&cluster.client_addr(old).expect("addr").to_string(), Duration::from_secs(2)).await;
    let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    on_leader.create("/paused-leader-session", b"", &ephemeral).await.expect("create");
    let mut states = on_leader.state_watcher();

    cluster.freeze(old).expect("freeze");
    await_true("another leader while the old one is paused", || async {
        for i in (0..3).filter(|&i| i != old) {
            if cluster.mode(i).await == Some(Mode::Leader) {
                return true;
            }
        }
        false
    })
    .await;
    // A new leader restarts every session's expiry clock when it takes over: the pause lasts
    // until the new leader has expired the session (its ephemeral node gone, as another server
    // sees it), however long after the takeover that is, not a fixed time that may end first.
    let observer = direct(&cluster, (old + 1) % 3).await;
    await_true("the new leader to expire the paused leader's session", || async {
        observer.check_stat("/paused-leader-session").await.is_ok_and(|stat| stat.is_none())
    })
    .await;
    cluster.thaw(old).expect("thaw");

    // The old leader rejoins as a follower; its session expired meanwhile (the new leader
    // heard nothing from it for longer than its timeout).
    await_true("the old leader to follow", || async { cluster.mode(old).await == Some(Mode::Follower) })
        .await;
    within("the session's expiry", async {
        let mut state = states.state();
        while state != SessionState::Expired {
            state = states.changed().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_way_client_paths_hold_requests_or_replies() {
    let cluster = ZkCluster::standalone().await.expect("standalone");
    let proxy = cluster.proxy().expect("proxy");
    let client = connect(&proxy.connect_string(), Duration::from_secs(10)).await;
    let observer = direct(&cluster, 0).await;

    // Client to server only: the request never reaches the server.
    proxy.hold_requests();
    let write = tokio::spawn({
        let client = client.clone();
        async move { create(&client, "/requests-held").await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await; // the fault's duration
    assert!(!write.is_finished(), "a request was answered while requests were held");
    assert!(
        observer.check_stat("/requests-held").await.expect("stat").is_none(),
        "a held request took effect"
    );
    proxy.heal();
    within("the held request", write).await.expect("join").expect("write");

    // Server to client only: the request takes effect, its reply does not arrive.
    proxy.hold_replies();
    let write = tokio::spawn({
        let client = client.clone();
        async move { create(&client, "/replies-held").await }
    });
    await_true("the write to take effect on the server", || async {
        observer.check_stat("/replies-held").await.ok().flatten().is_some()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await; // the fault's duration
    assert!(!write.is_finished(), "a reply arrived while replies were held");
    proxy.heal();
    within("the held reply", write).await.expect("join").expect("write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_way_partition_from_the_leader_takes_a_follower_out_until_healed() {
    let (cluster, leader, follower, on_leader) = ensemble_with_a_follower().await;

    // The leader's messages to the follower are held; the follower's to the leader flow.
    cluster.partition_one_way(leader, follower).expect("one-way");
    await_true("the follower to stop following", || async {
        cluster.mode(follower).await != Some(Mode::Follower)
    })
    .await;
    // The leader keeps its quorum with the other follower.
    assert_eq!(cluster.mode(leader).await, Some(Mode::Leader));
    within("a write during the one-way partition", create(&on_leader, "/one-way")).await.expect("write");

    cluster.heal_partition().expect("heal");
    await_true("the follower to rejoin", || async { cluster.mode(follower).await == Some(Mode::Follower) })
        .await;
    let rejoined = direct(&cluster, follower).await;
    await_true("the write on the rejoined follower", || async {
        rejoined.check_stat("/one-way").await.ok().flatten().is_some()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_follower_lags_behind_the_leader_and_a_pinned_proxy_reaches_it() {
    let (cluster, leader, follower, on_leader) = ensemble_with_a_follower().await;
    let on_follower = direct(&cluster, follower).await;

    // The follower hears the leader 1.5 s late (below syncLimit: it stays a follower).
    cluster.delay_link(leader, follower, Duration::from_millis(1500)).expect("delay");
    create(&on_leader, "/lag").await.expect("write through the leader");
    let (l, f) = (zxid(&cluster, leader).await.expect("zxid"), zxid(&cluster, follower).await.expect("zxid"));
    assert!(f < l, "the follower's zxid {f:#x} is not behind the leader's {l:#x}");
    assert!(
        on_follower.check_stat("/lag").await.expect("stat").is_none(),
        "the lagging follower has the write"
    );
    await_true("the follower to catch up", || async {
        on_follower.check_stat("/lag").await.ok().flatten().is_some()
    })
    .await;
    cluster.delay_link(leader, follower, Duration::ZERO).expect("undelay");
    assert_eq!(cluster.mode(follower).await, Some(Mode::Follower));

    // A proxy pinned to the follower: every client through it lands there.
    let conns = |cons: String| cons.lines().filter(|l| l.contains("queued=")).count();
    let mut before = Vec::new();
    for i in 0..3 {
        before.push(conns(cluster.four_letter(i, "cons").await.expect("cons")));
    }
    let proxy = cluster.proxy().expect("proxy");
    proxy.pin_to(cluster.client_addr(follower).expect("addr"));
    let mut pinned = Vec::new();
    for _ in 0..3 {
        pinned.push(connect(&proxy.connect_string(), Duration::from_secs(10)).await);
    }
    for (i, was) in before.into_iter().enumerate() {
        let now = conns(cluster.four_letter(i, "cons").await.expect("cons"));
        let want = was + if i == follower { 3 } else { 0 };
        assert_eq!(now, want, "connections on server {i} (the follower is {follower})");
    }
    proxy.unpin();
}

/// The operator's recovery after a full log disk (ZOOKEEPER-4882): the server restarted with no
/// data rejoins and takes the leader's state. A marker file beside its transaction logs shows
/// the data really went (a plain restart keeps it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_with_empty_data_rejoins_with_the_leaders_state() {
    let mut cluster =
        ZkCluster::start(ClusterConfig { nodes: 3, ..ClusterConfig::default() }.log_disk_mb(Some(16)))
            .await
            .expect("ensemble");
    let leader = cluster.wait_for_leader().await.expect("leader");
    let follower = a_follower(&cluster).await;
    let writer = direct(&cluster, leader).await;
    for n in 0..20 {
        create(&writer, &format!("/before-{n}")).await.expect("a write before the restart");
    }
    // The follower's transaction logs are on its log disk: `<node>/datalog/version-2`.
    let log = std::path::Path::new(&cluster.server_log(follower).expect("log"))
        .with_file_name("datalog")
        .join("version-2");
    let logs = |dir: &std::path::Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
            .unwrap_or_default()
    };
    assert!(logs(&log).iter().any(|f| f.starts_with("log.")), "no transaction log in {}", log.display());
    let marker = log.join("marker");
    std::fs::write(&marker, b"written before the restart").expect("marker");

    within("the restart with empty data", cluster.restart_with_empty_data(follower)).await.expect("restart");
    assert!(!marker.exists(), "the follower's transaction logs were not deleted");
    // It serves again, with everything written before: it took the leader's state.
    let agreed = || async {
        zxid(&cluster, follower).await.is_some()
            && zxid(&cluster, follower).await == zxid(&cluster, leader).await
    };
    await_true("the follower to catch up", agreed).await;
    let on_follower = direct(&cluster, follower).await;
    for n in 0..20 {
        assert!(
            on_follower.check_stat(&format!("/before-{n}")).await.expect("stat").is_some(),
            "/before-{n} missing on the follower restarted with empty data"
        );
    }
    create(&writer, "/after").await.expect("a write after the restart");
}
