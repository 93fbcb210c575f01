//! The harness's own tests, against real ZooKeeper servers.

mod common;

use common::{alive, connect, within};
use std::time::Duration;

use zk_testcluster::{Mode, ZkCluster};
use zookeeper_client::{Acls, Client, CreateMode, SessionState};

async fn wait_state(client: &Client, want: SessionState) {
    let mut watcher = client.state_watcher();
    within(&format!("{want:?}"), async {
        let mut state = watcher.state();
        while state != want {
            state = watcher.changed().await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_serves_counts_and_dies_with_its_handle() {
    let cluster = ZkCluster::standalone().await.expect("standalone");
    assert_eq!(cluster.mode(0).await, Some(Mode::Standalone));

    let client = connect(&cluster.connect_string(), Duration::from_secs(5)).await;
    let before = cluster.mntr(0).await.expect("mntr");
    client
        .create("/harness", b"x", &CreateMode::Persistent.with_acls(Acls::anyone_all()))
        .await
        .expect("create");
    let after = cluster.mntr(0).await.expect("mntr");
    assert!(after.packets_received() > before.packets_received(), "{before:?} -> {after:?}");
    // The byte counters move with a request: the create's bytes in (besides the 4 of `mntr`), and
    // its reply's bytes out, which the server adds after sending the reply: wait for them.
    assert!(after.bytes_received() > before.bytes_received() + 4, "{before:?} -> {after:?}");
    within("the reply's bytes in mntr", async {
        while cluster.mntr(0).await.expect("mntr").response_bytes() <= before.response_bytes() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(after.znode_count(), before.znode_count() + 1);

    let pid = cluster.pid(0).expect("pid");
    let dir = cluster.dir().expect("dir").to_path_buf();
    assert!(alive(pid));
    drop(client);
    drop(cluster);
    assert!(!alive(pid), "server {pid} survived its cluster handle");
    assert!(!dir.exists(), "{} was not removed", dir.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chroot_connect_string_roots_the_client() {
    let cluster = ZkCluster::standalone().await.expect("standalone");
    let root = connect(&cluster.connect_string(), Duration::from_secs(5)).await;
    root.create("/app", b"", &CreateMode::Persistent.with_acls(Acls::anyone_all()))
        .await
        .expect("create /app");
    let rooted = connect(&cluster.connect_string_chroot("/app"), Duration::from_secs(5)).await;
    rooted
        .create("/inside", b"", &CreateMode::Persistent.with_acls(Acls::anyone_all()))
        .await
        .expect("create");
    assert!(root.check_stat("/app/inside").await.expect("stat").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensemble_survives_killing_its_leader_and_node_rejoins() {
    let started = std::time::Instant::now();
    let mut cluster = ZkCluster::ensemble(3).await.expect("ensemble");
    eprintln!("a 3-node ensemble answered srvr with Mode: on every node after {:?}", started.elapsed());
    let leader = cluster.leader().await.expect("leader");
    let mut modes = Vec::new();
    for i in 0..3 {
        modes.push(cluster.mode(i).await);
    }
    assert_eq!(modes.iter().filter(|m| **m == Some(Mode::Leader)).count(), 1, "{modes:?}");
    assert_eq!(modes.iter().filter(|m| **m == Some(Mode::Follower)).count(), 2, "{modes:?}");

    let client = connect(&cluster.connect_string(), Duration::from_secs(6)).await;
    let opts = CreateMode::Persistent.with_acls(Acls::anyone_all());
    client.create("/before", b"1", &opts).await.expect("create before");

    cluster.kill(leader).await.expect("kill leader");
    let new_leader = within("a new leader", cluster.wait_for_leader()).await.expect("new leader");
    assert_ne!(new_leader, leader);
    // The client's session survives the failover and writes again.
    within("write after failover", async {
        loop {
            match client.create("/after", b"2", &opts).await {
                Ok(_) => break,
                // The client fails in-flight requests with the error that ended the connection:
                // `ConnectionLoss`, or `Custom` wrapping the socket error.
                Err(zookeeper_client::Error::ConnectionLoss | zookeeper_client::Error::Custom(_)) => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Err(e) => panic!("write after failover: {e}"),
            }
        }
    })
    .await;
    assert_ne!(client.state(), SessionState::Expired);

    cluster.restart(leader).await.expect("restart old leader");
    assert_eq!(cluster.mode(leader).await, Some(Mode::Follower));
    let (data, _) = client.get_data("/before").await.expect("data survived");
    assert_eq!(data, b"1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_restarts_with_its_data() {
    let mut cluster = ZkCluster::standalone().await.expect("standalone");
    let old_pid = cluster.pid(0).expect("pid");
    {
        let client = connect(&cluster.connect_string(), Duration::from_secs(5)).await;
        client
            .create("/kept", b"v", &CreateMode::Persistent.with_acls(Acls::anyone_all()))
            .await
            .expect("create");
    }
    cluster.restart(0).await.expect("restart");
    assert!(!alive(old_pid));
    assert_ne!(cluster.pid(0), Some(old_pid));
    let client = connect(&cluster.connect_string(), Duration::from_secs(5)).await;
    assert_eq!(client.get_data("/kept").await.expect("get").0, b"v");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freeze_silences_a_node_and_thaw_revives_it() {
    let cluster = ZkCluster::standalone().await.expect("standalone");
    cluster.freeze(0).expect("freeze");
    assert_eq!(cluster.mode(0).await, None, "a frozen server answered srvr");
    cluster.thaw(0).expect("thaw");
    assert_eq!(cluster.mode(0).await, Some(Mode::Standalone));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_cut_disconnects_then_the_session_reconnects() {
    let cluster = ZkCluster::standalone().await.expect("standalone");
    let proxy = cluster.proxy().expect("proxy");
    let client = connect(&proxy.connect_string(), Duration::from_secs(4)).await;
    client.create("/p", b"", &CreateMode::Persistent.with_acls(Acls::anyone_all())).await.expect("create");
    assert_eq!(proxy.connections(), 1);

    let mut states = client.state_watcher();
    proxy.cut();
    assert_eq!(within("Disconnected", states.changed()).await, SessionState::Disconnected);
    assert_eq!(within("SyncConnected", states.changed()).await, SessionState::SyncConnected);
    // Same session, still usable.
    assert!(client.check_stat("/p").await.expect("stat").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_reset_fails_the_request_in_flight_with_the_socket_error() {
    let cluster = ZkCluster::standalone().await.expect("standalone");
    let proxy = cluster.proxy().expect("proxy");
    let client = connect(&proxy.connect_string(), Duration::from_secs(6)).await;
    let observer = connect(&cluster.connect_string(), Duration::from_secs(6)).await;

    // A create that reaches the server while its reply is held back in the proxy.
    proxy.set_reply_latency(Duration::from_secs(3));
    let creating = tokio::spawn({
        let client = client.clone();
        let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
        async move { client.create("/reset", b"", &open).await }
    });
    within("create landed", async {
        while observer.check_stat("/reset").await.expect("stat").is_none() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    proxy.set_reply_latency(Duration::ZERO);
    let mut states = client.state_watcher();
    proxy.reset();

    // Not `ConnectionLoss`: the client crate hands in-flight requests the error that ended the
    // connection, here the reset socket. This is the case recipes must treat as connection loss.
    match within("create outcome", creating).await.expect("join") {
        // The I/O error sits behind an `Arc<dyn Error>` the crate does not expose for
        // downcasting; its kind shows in the debug form.
        Err(zookeeper_client::Error::Custom(e)) => {
            assert!(format!("{e:?}").contains("kind: ConnectionReset"), "{e:?}")
        }
        other => panic!("expected the reset socket's error, got {other:?}"),
    }
    assert_eq!(within("Disconnected", states.changed()).await, SessionState::Disconnected);
    assert_eq!(within("SyncConnected", states.changed()).await, SessionState::SyncConnected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_blackhole_past_the_session_timeout_expires_the_session() {
    let cluster = ZkCluster::standalone().await.expect("standalone");
    let proxy = cluster.proxy().expect("proxy");
    let client = connect(&proxy.connect_string(), Duration::from_secs(1)).await;
    let observer = connect(&cluster.connect_string(), Duration::from_secs(5)).await;
    client.create("/eph", b"", &CreateMode::Ephemeral.with_acls(Acls::anyone_all())).await.expect("create");

    proxy.blackhole();
    // The server expires the session (the ephemeral node goes) and, once healed, the client
    // learns it; this is how tests produce session expiry without touching the server.
    within("ephemeral removal", async {
        while observer.check_stat("/eph").await.expect("stat").is_some() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    proxy.heal();
    wait_state(&client, SessionState::Expired).await;
    assert_eq!(client.check_stat("/eph").await, Err(zookeeper_client::Error::SessionExpired));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_latency_delays_but_delivers() {
    let cluster = ZkCluster::standalone().await.expect("standalone");
    let proxy = cluster.proxy().expect("proxy");
    let client = connect(&proxy.connect_string(), Duration::from_secs(5)).await;
    proxy.set_latency(Duration::from_millis(150));
    let started = std::time::Instant::now();
    client.create("/slow", b"", &CreateMode::Persistent.with_acls(Acls::anyone_all())).await.expect("create");
    // A request and its reply each cross the proxy once: the latency is real, not asserted as a
    // speed but as a lower bound the proxy must impose.
    assert!(started.elapsed() >= Duration::from_millis(300), "{:?}", started.elapsed());
    proxy.set_latency(Duration::ZERO);
}

/// A slow server: replies from the server named are held back (the request has landed, its
/// reply has not come), replies from others are not, and the held reply still arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_server_latency_holds_back_that_servers_replies_only() {
    let cluster = ZkCluster::standalone().await.expect("standalone");
    let observer = connect(&cluster.connect_string(), Duration::from_secs(5)).await;
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    // Another server's slowness is not this one's.
    let elsewhere = cluster.proxy().expect("proxy");
    let client = connect(&elsewhere.connect_string(), Duration::from_secs(5)).await;
    elsewhere.set_server_latency("127.0.0.1:9".parse().unwrap(), Duration::from_secs(3600));
    within("a reply from a server that is not slow", client.create("/fast", b"", &open))
        .await
        .expect("create");

    let proxy = cluster.proxy().expect("proxy");
    let client = connect(&proxy.connect_string(), Duration::from_secs(10)).await;
    proxy.set_server_latency(cluster.client_addr(0).expect("addr"), Duration::from_secs(2));
    let creating = tokio::spawn({
        let (client, open) = (client.clone(), open);
        async move { client.create("/slow-server", b"", &open).await }
    });
    within("create landed", async {
        while observer.check_stat("/slow-server").await.expect("stat").is_none() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(!creating.is_finished(), "the slow server's reply came through at once");
    proxy.set_server_latency(cluster.client_addr(0).expect("addr"), Duration::ZERO);
    within("the held reply", creating).await.expect("join").expect("create");
}

/// `jvm_properties` reach the server: with the container reaper set to check every 100 ms, an
/// emptied container node goes well within the patience. With ZooKeeper's default (first check
/// 60 s after start) it would still be there when the patience runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jvm_properties_set_the_container_reaper_interval() {
    let config = zk_testcluster::ClusterConfig {
        jvm_properties: vec![("znode.container.checkIntervalMs".into(), "100".into())],
        ..zk_testcluster::ClusterConfig::default()
    };
    let cluster = ZkCluster::start(config).await.expect("standalone");
    let client = connect(&cluster.connect_string(), Duration::from_secs(5)).await;
    let container = CreateMode::Container.with_acls(Acls::anyone_all());
    client.create("/order-1", b"", &container).await.expect("create container");
    client
        .create("/order-1/lock", b"", &CreateMode::Ephemeral.with_acls(Acls::anyone_all()))
        .await
        .expect("create child");
    client.delete("/order-1/lock", None).await.expect("delete child");
    within("the container reaper", async {
        while client.check_stat("/order-1").await.expect("stat").is_some() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

/// `Cpus_allowed_list` of a `/proc/<pid>/status` or `/proc/<pid>/task/<tid>/status`, e.g. "0-1,3".
fn cpus_allowed_list(status_path: &str) -> String {
    let status = std::fs::read_to_string(status_path).unwrap_or_else(|e| panic!("{status_path}: {e}"));
    let line = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:"));
    line.unwrap_or_else(|| panic!("no Cpus_allowed_list in {status_path}")).trim().to_string()
}

/// The CPUs of a list such as "0-1,3".
fn parse_cpu_list(list: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        cpus.extend(a.parse::<usize>().expect("cpu")..=b.parse::<usize>().expect("cpu"));
    }
    cpus
}

/// Every thread of `pid` may run only on `want` (its `Cpus_allowed_list`).
fn assert_pinned(pid: u32, want: &str) {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the server's threads");
    let mut threads = 0;
    for task in tasks.flatten() {
        let path = task.path().join("status").display().to_string();
        assert_eq!(cpus_allowed_list(&path), want, "{path}");
        threads += 1;
    }
    // A JVM runs many threads (GC, JIT, the server's own): all of them inherited the set.
    assert!(threads > 1, "server {pid} shows {threads} thread");
}

/// `cpus` pins the server, every thread of its JVM, to the CPUs asked for, after a restart too,
/// as read back from /proc. The test process may run on more CPUs than the one asked for on any
/// machine with two or more, so a pinning that did nothing would show the wider set and fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpus_pin_every_server_thread() {
    let ours = parse_cpu_list(&cpus_allowed_list("/proc/self/status"));
    let cpu = *ours.last().expect("this process runs on some CPU");
    if ours.len() < 2 {
        eprintln!("only CPU {cpu} here: this run cannot tell a pinned server from an unpinned one");
    }
    let config =
        zk_testcluster::ClusterConfig { cpus: Some(vec![cpu]), ..zk_testcluster::ClusterConfig::default() };
    let mut cluster = ZkCluster::start(config).await.expect("a pinned standalone server");
    assert_eq!(cluster.mode(0).await, Some(Mode::Standalone));
    assert_pinned(cluster.pid(0).expect("pid"), &cpu.to_string());
    cluster.restart(0).await.expect("restart");
    assert_pinned(cluster.pid(0).expect("pid after the restart"), &cpu.to_string());
    // The test process itself was left alone.
    assert_eq!(parse_cpu_list(&cpus_allowed_list("/proc/self/status")), ours);

    let none =
        zk_testcluster::ClusterConfig { cpus: Some(Vec::new()), ..zk_testcluster::ClusterConfig::default() };
    assert!(ZkCluster::start(none).await.is_err(), "an empty CPU set started a server");
}
