//! Metrics on a Prometheus endpoint while a small, real workload runs.
//!
//! ```text
//! cargo run --example metrics                  # serves until Ctrl-C (or SIGTERM)
//! cargo run --example metrics -- --seconds 60  # ... or for 60 s, then prints a summary
//! cargo run --example metrics -- --listen 127.0.0.1:9464
//! ```
//!
//! zk-recipes records through the `metrics` facade; the application picks the exporter. Here it
//! is `metrics-exporter-prometheus` with its own HTTP listener (a free loopback port unless
//! `--listen` names one), and histogram buckets for every `_seconds` metric and the queue
//! length, so that Prometheus gets `_bucket` series it can aggregate across instances
//! (`histogram_quantile`), not per-process quantiles (the exporter's default: a summary). The
//! first line printed is `metrics at http://ADDR/metrics`.
//!
//! The workload runs in rounds, one after another (`--pace`, default 1s, between them), against
//! a throwaway ZooKeeper unless `ZK_CONNECT` is set. Each round makes every series of
//! `docs/metrics.md` move: per-order locks and a semaphore (role `orders`, `packers`), a busy
//! try and a timed-out wait (`ledger`), a revocation asked and honoured (`fleet`), a hold lost to
//! an operator deleting its node (`audit`), a hold ended by its `max_hold` and the lock delay
//! the next holder waits out (`reports`), a hold lost to its session's expiry and a disconnect
//! (`fragile`: two sessions live on a thread of their own, which the round stops, as a long GC
//! pause or a stopped VM stops a process; ZooKeeper expires the one whose timeout is shorter
//! than the pause, which comes back as its next generation, and the other only reconnects), and
//! a leader latch's term (`jobs`). Beside the rounds, one waiter queues behind a 12 s holder
//! again and again (`batch`): the long waits the dashboard and the `ZkLockWaitsLong` alert look
//! for (`ops/`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use zk_recipes::{
    ConnectionState, InterProcessMutex, InterProcessSemaphore, LatchOptions, LeaderLatch, Lock, LockOptions,
    LockStatus, QueueEvent, Session,
};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Bucket bounds (seconds) for every `_seconds` histogram: waits and holds from a millisecond
/// to half an hour. `zklock --metrics-addr` uses the same (docs/metrics.md lists them; the
/// tests compare what both serve against that list).
const SECONDS_BUCKETS: [f64; 19] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    600.0, 1800.0,
];

/// Bucket bounds for `zk_recipes_queue_length_at_join` (nodes already queued when ours joined).
/// Also as `zklock --metrics-addr` has them.
const QUEUE_BUCKETS: [f64; 12] = [0.0, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0];

/// How long the `batch` holder keeps its lock while the other `batch` handle waits: past the
/// 10 s of the long-wait alert.
const LONG_HOLD: Duration = Duration::from_secs(12);

/// The bound on every wait for an event (a lost hold, a reconnected session).
const PATIENCE: Duration = Duration::from_secs(30);

struct Options {
    listen: Option<SocketAddr>,
    seconds: Option<u64>,
    pace: Duration,
}

fn options() -> Result<Options, Error> {
    let mut options = Options { listen: None, seconds: None, pace: Duration::from_secs(1) };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--listen" => options.listen = Some(value()?.parse()?),
            "--seconds" => options.seconds = Some(value()?.parse()?),
            "--pace" => options.pace = Duration::from_secs_f64(value()?.parse()?),
            other => return Err(format!("unknown argument {other}; see the example's doc comment").into()),
        }
    }
    Ok(options)
}

/// Installs the exporter as the global recorder, its HTTP listener on `listen` or, when none is
/// given, on a free loopback port (asked from the kernel; tried again if another process takes
/// it first). Returns the address it serves and a handle to render the page ourselves.
fn install(listen: Option<SocketAddr>) -> Result<(SocketAddr, PrometheusHandle), Error> {
    let mut attempts = 0;
    loop {
        let addr = match listen {
            Some(addr) => addr,
            None => std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?,
        };
        let built = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &SECONDS_BUCKETS)?
            .set_buckets_for_metric(Matcher::Full("zk_recipes_queue_length_at_join".into()), &QUEUE_BUCKETS)?
            .with_http_listener(addr)
            .build();
        match built {
            Ok((recorder, exporter)) => {
                let handle = recorder.handle();
                tokio::spawn(exporter);
                metrics::set_global_recorder(recorder)?;
                return Ok((addr, handle));
            }
            Err(e) if listen.is_none() && attempts < 5 => {
                attempts += 1;
                eprintln!("listening on {addr}: {e}; trying another port");
            }
            Err(e) => return Err(format!("listening on {addr}: {e}").into()),
        }
    }
}

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> Result<T, Error> {
    tokio::time::timeout(PATIENCE, fut).await.map_err(|_| format!("timed out waiting for {what}").into())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let options = options()?;
    let (addr, page) = install(options.listen)?;
    println!("metrics at http://{addr}/metrics");

    let (_zk, connect) = match std::env::var("ZK_CONNECT") {
        Ok(connect) if !connect.trim().is_empty() => (None, connect),
        _ => {
            let zk = zk_testcluster::ZkCluster::standalone().await?;
            let connect = zk.connect_string();
            (Some(zk), connect)
        }
    };
    println!("ZooKeeper at {connect}");
    let session = Session::connect(&connect, Duration::from_secs(10)).await?;
    let fragile = Fragile::start(connect.clone());
    let batch = tokio::spawn(long_waits(session.clone()));

    let started = Instant::now();
    let until = options.seconds.map(|s| started + Duration::from_secs(s));
    let mut rounds = 0u64;
    let stopped = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r,
            _ = term.recv() => Ok(()),
        }
    };
    tokio::pin!(stopped);
    loop {
        tokio::select! {
            r = round(&session, &fragile) => r?,
            r = &mut stopped => { r?; break; }
        }
        rounds += 1;
        println!("round {rounds} done ({:.1}s)", started.elapsed().as_secs_f64());
        if until.is_some_and(|until| Instant::now() >= until) {
            break;
        }
        tokio::select! {
            () = tokio::time::sleep(options.pace) => {}
            r = &mut stopped => { r?; break; }
        }
    }
    batch.abort();

    // The summary, from the recorder itself (Prometheus reads the same page over HTTP).
    let text = page.render();
    for line in text.lines().filter(|l| {
        l.starts_with("zk_recipes_acquires_total") || l.starts_with("zk_recipes_holds_lost_total")
    }) {
        println!("{line}");
    }
    let expected = format!(
        r#"zk_recipes_acquires_total{{recipe="mutex",role="orders",outcome="acquired"}} {}"#,
        40 * rounds
    );
    if rounds > 0 && !text.lines().any(|l| l == expected) {
        return Err(format!("the page does not show the {} order-lock acquisitions", 40 * rounds).into());
    }
    drop(fragile);
    session.close().await;
    Ok(())
}

/// One round of the workload; see the module docs.
async fn round(session: &Session, fragile: &Fragile) -> Result<(), Error> {
    // 4 workers take per-order locks (one role, many paths), then a semaphore slot.
    let mut tasks = Vec::new();
    for worker in 0..4 {
        let session = session.clone();
        tasks.push(tokio::spawn(async move {
            for order in 0..10 {
                let path = format!("/shop/orders/{}", order % 3);
                let lock = InterProcessMutex::with_options(
                    &session,
                    &path,
                    LockOptions::new().metrics_role("orders"),
                )?;
                let guard = lock.acquire().await?;
                tokio::time::sleep(Duration::from_millis(2)).await; // the work
                guard.release().await?;
            }
            let packers = LockOptions::new().metrics_role("packers");
            let slots = InterProcessSemaphore::with_options(&session, "/shop/packers", 2, packers)?;
            let lease = slots.acquire().await?;
            tokio::time::sleep(Duration::from_millis(5)).await;
            lease.release().await?;
            Ok::<_, zk_recipes::Error>(worker)
        }));
    }
    for task in tasks {
        task.await??;
    }

    // Busy and timed out: while another handle holds.
    let ledger = || {
        InterProcessMutex::with_options(session, "/shop/ledger", LockOptions::new().metrics_role("ledger"))
    };
    let (holder, other) = (ledger()?, ledger()?);
    let held = holder.acquire().await?;
    if other.try_acquire().await?.is_some() {
        return Err("a second handle took a held mutex".into());
    }
    if other.acquire_timeout(Duration::from_millis(50)).await?.is_some() {
        return Err("a timed wait on a held mutex succeeded".into());
    }
    held.release().await?;
    other.settled().await;

    // A revocation asked of a revocable holder, which honours it.
    let fleet = LockOptions::new().metrics_role("fleet").revocable(true);
    let held = InterProcessMutex::with_options(session, "/shop/fleet", fleet)?.acquire().await?;
    let mut status = held.status();
    zk_recipes::request_revocation(session, held.node_path()).await?;
    within("the revocation request", status.wait_for(|s| *s == LockStatus::RevocationRequested)).await??;
    held.release().await?;

    // An operator deletes a holder's node: a lost hold (node_deleted).
    let audit = LockOptions::new().metrics_role("audit").revocable(true);
    let audit = InterProcessMutex::with_options(session, "/shop/audit", audit)?;
    let held = audit.acquire().await?;
    let mut status = held.status();
    session
        .client()?
        .delete(held.node_path(), None)
        .await
        .map_err(|e| format!("deleting the audit node: {e}"))?;
    within("the deleted hold", status.wait_for(|s| *s == LockStatus::Lost)).await??;
    drop(held);
    audit.settled().await;

    // A hold ended by its max_hold (a loss), and the lock delay the next holder waits out.
    let reports = || LockOptions::new().metrics_role("reports").lock_delay(Duration::from_millis(200));
    let limited = InterProcessMutex::with_options(
        session,
        "/shop/reports",
        reports().max_hold(Duration::from_millis(300)),
    )?;
    let next = InterProcessMutex::with_options(session, "/shop/reports", reports())?;
    let ended = limited.acquire().await?;
    let mut delayed = false;
    let mut saw = |e: &QueueEvent| delayed |= matches!(e, QueueEvent::LockDelay { .. });
    let taken = within("the next reports holder", next.acquire_with_events(None, &mut saw)).await??;
    let taken = taken.ok_or("the reports lock was not taken")?;
    taken.release().await?;
    drop(ended);
    limited.settled().await;
    if !delayed {
        return Err("the reports holder after a max_hold did not wait out the lock delay".into());
    }

    // A session expires under a hold.
    fragile.expire().await?;

    // A leader latch's term: an acquisition and a hold of recipe `leader-latch`.
    let latch = LeaderLatch::with_options(
        session,
        "/shop/leader",
        LatchOptions::new().participant_id("metrics-example").metrics_role("jobs"),
    )?;
    latch.start()?;
    within("leadership", latch.await_leadership()).await??;
    latch.close().await;
    Ok(())
}

/// Beside the rounds: a `batch` holder keeps its lock for `LONG_HOLD` while the other handle
/// waits for it, over and over. The first acquisition is uncontended, so the wait histogram's
/// series exist (at zero) before the first long wait lands in them.
async fn long_waits(session: Session) -> Result<(), Error> {
    let batch =
        || InterProcessMutex::with_options(&session, "/shop/batch", LockOptions::new().metrics_role("batch"));
    let (holder, waiter) = (batch()?, batch()?);
    waiter.acquire().await?.release().await?;
    loop {
        let held = holder.acquire().await?;
        let mut queued = |_: &QueueEvent| {};
        let waiting = waiter.acquire_with_events(None, &mut queued);
        tokio::pin!(waiting);
        // The holder's job: LONG_HOLD, while the waiter waits.
        tokio::select! {
            r = &mut waiting => return Err(format!("the batch waiter got a held lock: {r:?}").into()),
            () = tokio::time::sleep(LONG_HOLD) => {}
        }
        held.release().await?;
        let taken = within("the batch waiter", &mut waiting).await??.ok_or("the batch lock was not taken")?;
        taken.release().await?;
    }
}

/// Two sessions on a current-thread runtime on a thread of their own, so that stopping that
/// thread stops everything they do (their pings too), as a long GC pause or a stopped VM stops
/// a process, while the rest of the example runs on. Each round stops it for three times the
/// `expiring` session's timeout: ZooKeeper expires that session, while the `blipping` one, whose
/// timeout is 1.5 times the pause, is suspended and reconnects to the same session.
///
/// The `blipping` session holds a lock across the pause, so its suspension is its safe window's
/// (docs/safety.md): a hold's window ends at most 0.58 of the timeout after the last answer
/// (0.87 of the pause), so the pause always passes it, whatever the client does; the server
/// keeps the session, whose last request came half a pause before its timeout. Without a hold
/// it would rest on the client giving the connection up, which after a pause is a race: the
/// client checks its read timeout on the ticks it missed, each with its old time, and a ping
/// answered while it catches up keeps the connection.
struct Fragile {
    requests: tokio::sync::mpsc::Sender<tokio::sync::oneshot::Sender<Result<(), String>>>,
}

struct Paused {
    expiring: Session,
    blipping: Session,
    pause: Duration,
}

impl Fragile {
    fn start(connect: String) -> Fragile {
        let (requests, mut incoming) =
            tokio::sync::mpsc::channel::<tokio::sync::oneshot::Sender<Result<(), String>>>(1);
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
            let runtime = runtime.expect("a runtime for the paused sessions");
            runtime.block_on(async move {
                let sessions = Paused::connect(&connect).await.map_err(|e| e.to_string());
                while let Some(reply) = incoming.recv().await {
                    let paused = match &sessions {
                        Ok(sessions) => sessions.round().await.map_err(|e| e.to_string()),
                        Err(e) => Err(format!("connecting the paused sessions: {e}")),
                    };
                    let _ = reply.send(paused);
                }
                if let Ok(sessions) = sessions {
                    sessions.expiring.close().await;
                    sessions.blipping.close().await;
                }
            });
        });
        Fragile { requests }
    }

    /// One pause, with what it brings about (see [`Paused::round`]).
    async fn expire(&self) -> Result<(), Error> {
        let (reply, paused) = tokio::sync::oneshot::channel();
        self.requests.send(reply).await.map_err(|_| "the paused sessions' thread ended")?;
        Ok(paused.await.map_err(|_| "the paused sessions' thread ended")??)
    }
}

impl Paused {
    async fn connect(connect: &str) -> Result<Paused, Error> {
        // Short, so that the pause is short; the server keeps it within its bounds (a default
        // server: at least 4 s).
        let expiring = Session::connect(connect, Duration::from_secs(1)).await?;
        let pause = expiring.session_timeout() * 3;
        let blipping = Session::connect(connect, pause.mul_f64(1.5)).await?;
        let timeout = blipping.session_timeout();
        if timeout.mul_f64(0.6) >= pause || timeout < pause.mul_f64(1.4) {
            return Err(format!(
                "the server gave the blipping session {:?}: a {pause:?} pause would not just suspend it",
                blipping.session_timeout()
            )
            .into());
        }
        Ok(Paused { expiring, blipping, pause })
    }

    /// On the sessions' own thread: take a lock on each session, stop the thread for the pause
    /// (ZooKeeper expires the expiring session and deletes its node), then see that hold lost
    /// (cause `session_expired`), that session's next generation connected, and the blipping
    /// session suspended and reconnected, its hold kept.
    async fn round(&self) -> Result<(), Error> {
        let generation = self.expiring.generation();
        // Without the watch on its own node: ZooKeeper deletes the node as it expires the
        // session and may still send that deletion down the connection it then closes; a
        // watching hold could read it first and count the loss as `node_deleted`.
        let options = LockOptions::new().metrics_role("fragile").watch_own_node(false);
        let held =
            InterProcessMutex::with_options(&self.expiring, "/shop/expiring", options)?.acquire().await?;
        let mut status = held.status();
        let blipping = LockOptions::new().metrics_role("fragile");
        let kept =
            InterProcessMutex::with_options(&self.blipping, "/shop/blipping", blipping)?.acquire().await?;
        let mut blips = self.blipping.events();
        std::thread::sleep(self.pause); // the pause
        within("the hold lost to the expiry", status.wait_for(|s| *s == LockStatus::Lost)).await??;
        drop(held);
        let mut states = self.expiring.states();
        let next = |s: &zk_recipes::SessionStatus| s.generation > generation && s.state.is_connected();
        within("the expired session's next generation", states.wait_for(next)).await??;
        let suspended = async {
            loop {
                match blips.recv().await {
                    Ok(event) if event.state == ConnectionState::Suspended => return Ok(()),
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        };
        within("the blipping session's disconnect", suspended).await??;
        within(
            "the blipping session's reconnection",
            self.blipping.states().wait_for(|s| s.state.is_connected()),
        )
        .await??;
        kept.release().await?;
        Ok(())
    }
}
