//! Faked clocks ([`FakeClock`], libfaketime) on a real ZooKeeper server and on a child process.
//!
//! Each test fails when the fault is a no-op: they were checked with the fake environment
//! replaced by an empty one.

mod common;

use common::{connect, within};

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use zk_testcluster::{ClusterConfig, FakeClock, ZkCluster};
use zookeeper_client::{Acls, CreateMode, EventType};

/// A server whose clock runs at 2× expires a silent session before the negotiated timeout has
/// passed on the machine's clock: ZooKeeper expires a session `timeout` after the session's last
/// request on the server's own (`System.nanoTime`) clock. Event order, seen from outside: the
/// watch on the silent session's ephemeral node fires before a timer of the session timeout
/// started before that session's last request. On a true clock, the server can expire the
/// session no sooner than the timeout after that request reached it, so the timer fires first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_a_fast_clock_expires_a_silent_session_before_its_timeout() {
    let timeout = Duration::from_secs(8);
    let mut cluster = ZkCluster::start(ClusterConfig::default()).await.expect("standalone");
    cluster.restart_with_env(0, &FakeClock::Rate(2.0).env().expect("libfaketime")).await.expect("restart");
    let proxy = cluster.proxy().expect("proxy");
    let silent = connect(&proxy.connect_string(), timeout).await;
    assert_eq!(silent.session_timeout(), timeout, "the timeout the server granted");
    let observer = connect(&cluster.connect_string(), Duration::from_secs(30)).await;
    // The session's last request: the timer starts before it is sent.
    let last_request = Instant::now();
    silent
        .create("/silent", b"", &CreateMode::Ephemeral.with_acls(Acls::anyone_all()))
        .await
        .expect("create");
    proxy.blackhole();
    let (stat, watch) = observer.check_and_watch_stat("/silent").await.expect("watch");
    assert!(stat.is_some(), "the ephemeral node is there before the expiry");
    let timer = tokio::time::sleep_until((last_request + timeout).into());
    let expired_first = within("the expiry or the timer", async {
        tokio::select! {
            event = watch.changed() => {
                assert_eq!(event.event_type, EventType::NodeDeleted, "{event:?}");
                true
            }
            _ = timer => false,
        }
    })
    .await;
    assert!(
        expired_first,
        "the session outlived its timeout on the machine's clock: the server's clock is not fast"
    );
    proxy.heal();
    // Restored: the same server on a true clock serves again.
    cluster.restart_with_env(0, &[]).await.expect("restart on a true clock");
    let after = connect(&cluster.connect_string(), Duration::from_secs(5)).await;
    assert!(after.check_stat("/silent").await.expect("stat").is_none());
}

/// A wall-clock step fakes `CLOCK_REALTIME` only: a child under `WallOffset(+1 h)` reads a wall
/// clock an hour ahead of ours.
#[test]
fn a_wall_clock_offset_moves_a_childs_wall_clock() {
    let env = FakeClock::WallOffset(3600).env().expect("libfaketime");
    let out = std::process::Command::new("date").arg("+%s").envs(env).output().expect("date");
    let theirs: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().expect("seconds");
    let ours = SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs();
    assert!(theirs >= ours + 3000, "the child's wall clock {theirs} is not an hour past ours {ours}");
}
