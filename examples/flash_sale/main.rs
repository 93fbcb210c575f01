//! A flash sale on the real parts: ZooKeeper locks, a Redis stock, PostgreSQL orders, several
//! worker processes, and one holder paused between its last check and its writes.
//!
//! ```text
//! scripts/flash-sale              # or: cargo run --example flash_sale
//! scripts/flash-sale --unfenced   # the same with unfenced writes: the damage a pause does
//! ```
//!
//! A stock of `STOCK` items in Redis; `USERS` users, each trying `ATTEMPTS` times; one order per
//! user, kept by a per-user `InterProcessMutex` (`/flash-sale/users/<user>`). `WORKERS` worker
//! processes (this executable again, `--worker N`), each with its own `Session`, take the
//! purchase requests. Under the user's lock a worker registers the lock's fencing token at both
//! stores, reads that the user has no order, calls `guard.ensure_safe(margin)` right before its
//! writes, then decrements the stock (a Lua script that checks the fence) and inserts the order
//! (one statement that checks the fence).
//!
//! One worker, on one purchase, stops itself with SIGSTOP after its window check passed and
//! before its writes: the pause no lock can prevent. The orchestrator waits until it sees the
//! process stopped, keeps it stopped for 3 session timeouts while another worker takes that
//! user's lock (the paused session expired) and buys, then resumes it. Its late writes must be
//! refused by both stores (`StaleToken`), and `ensure_safe` and `current_status()` must no
//! longer say it is safe. The run exits non-zero on an oversell, a user with two orders, a
//! negative stock, a late write not refused, or a pause that did not happen.
//!
//! With `--unfenced` the writes carry no token (the lock alone): the late writes land, and the
//! report shows the damage. It is a demonstration and exits 0.
//!
//! It starts a throwaway ZooKeeper, PostgreSQL and Redis (on free loopback ports) unless
//! `ZK_CONNECT`, `--postgres PARAMS` or `--redis URL` name servers you run; it then clears its
//! own tables' rows and keys for the sale first. Every worker and server it started is stopped
//! by PID, also on error.

#[path = "../fencing/mod.rs"]
mod fencing;
mod pool;
mod protocol;
mod report;
mod sale;
mod store;
mod worker;

use std::time::Duration;

use zk_testcluster::{PostgresServer, RedisServer, ZkCluster};

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Items in stock.
pub const STOCK: i64 = 20;
/// The one product on sale.
const ITEM: &str = "sku-flash";
/// A short session, so that the paused holder's expires soon.
const SESSION_TIMEOUT: Duration = Duration::from_secs(2);
/// What `ensure_safe` asks to be left of the safe window before each write.
const MARGIN: Duration = Duration::from_millis(500);

/// What every process of a run shares.
#[derive(Clone, Debug)]
pub struct Settings {
    pub zk: String,
    pub postgres: String,
    pub redis: String,
    pub item: String,
    pub fenced: bool,
    pub session_timeout: Duration,
    pub margin: Duration,
}

impl Settings {
    /// The arguments a worker process is started with.
    fn worker_args(&self) -> Vec<String> {
        let mut args = vec![
            "--zk".into(),
            self.zk.clone(),
            "--postgres".into(),
            self.postgres.clone(),
            "--redis".into(),
            self.redis.clone(),
        ];
        if !self.fenced {
            args.push("--unfenced".into());
        }
        args
    }
}

/// The command line: flags, and `--name VALUE` options.
struct Args(Vec<String>);

impl Args {
    fn value(&self, name: &str) -> Result<Option<String>, Error> {
        match self.0.iter().position(|a| a == name) {
            None => Ok(None),
            Some(i) => match self.0.get(i + 1) {
                Some(v) if !v.starts_with("--") => Ok(Some(v.clone())),
                _ => Err(format!("{name} needs a value").into()),
            },
        }
    }

    fn flag(&self, name: &str) -> bool {
        self.0.iter().any(|a| a == name)
    }

    fn check(&self) -> Result<(), Error> {
        const KNOWN: [&str; 6] = ["--worker", "--zk", "--postgres", "--redis", "--unfenced", "--help"];
        let mut i = 0;
        while i < self.0.len() {
            let a = self.0[i].as_str();
            if !KNOWN.contains(&a) {
                return Err(format!("unknown argument {a:?} (try --help)").into());
            }
            i += if matches!(a, "--unfenced" | "--help") { 1 } else { 2 };
        }
        Ok(())
    }
}

const USAGE: &str = "usage: flash_sale [--unfenced] [--postgres PARAMS] [--redis URL]
  --unfenced         writes without fencing tokens (a demonstration of the damage; exits 0)
  --postgres PARAMS  a PostgreSQL server you run (tokio-postgres params, e.g. \
\"host=127.0.0.1 port=5432 user=postgres\")
  --redis URL        a Redis server you run (e.g. redis://127.0.0.1:6379/)
  ZK_CONNECT         a ZooKeeper you run; otherwise a throwaway one is started";

/// The orchestrator: servers, setup, workers, the sale, the report. Returns whether it passed.
async fn orchestrate(args: &Args) -> Result<bool, Error> {
    let fenced = !args.flag("--unfenced");
    let (postgres, _pg) = match args.value("--postgres")? {
        Some(p) => (p, None),
        None => {
            let server = PostgresServer::start().await.map_err(|e| format!("starting PostgreSQL: {e}"))?;
            (server.connect_params(), Some(server))
        }
    };
    let (redis, _redis) = match args.value("--redis")? {
        Some(r) => (r, None),
        None => {
            let server = RedisServer::start().await.map_err(|e| format!("starting Redis: {e}"))?;
            (server.url(), Some(server))
        }
    };
    // The stores first: a server given on the command line that cannot be reached is reported
    // before anything else starts.
    let mut settings = Settings {
        zk: String::new(),
        postgres,
        redis,
        item: ITEM.into(),
        fenced,
        session_timeout: SESSION_TIMEOUT,
        margin: MARGIN,
    };
    let admin = store::Stores::connect(&settings).await?;
    let (zk, _zk) = match zk_testcluster::external_connect_string() {
        Some(c) => (c, None),
        None => {
            let cluster = ZkCluster::standalone().await.map_err(|e| format!("starting ZooKeeper: {e}"))?;
            (cluster.connect_string(), Some(cluster))
        }
    };
    settings.zk = zk;
    let own = |started: bool| if started { "started for this run" } else { "yours" };
    println!(
        "Flash sale: {STOCK} items of {ITEM}, {} users trying {} times each, {} worker processes, {} writes.",
        sale::USERS,
        sale::ATTEMPTS,
        sale::WORKERS,
        if fenced { "fenced" } else { "UNFENCED" }
    );
    println!("  ZooKeeper  {} ({})", settings.zk, own(_zk.is_some()));
    println!("  PostgreSQL {} ({})", settings.postgres, own(_pg.is_some()));
    println!("  Redis      {} ({})", settings.redis, own(_redis.is_some()));
    println!(
        "  session timeout {:?}, ensure_safe margin {:?}, one lock per user: /flash-sale/users/<user>",
        settings.session_timeout, settings.margin
    );

    admin.setup(STOCK).await?;
    let mut pool = pool::Pool::spawn(sale::WORKERS, &settings.worker_args())?;
    let mut tally = report::Tally::default();
    let ran = sale::run(&mut pool, &settings, &mut tally).await;
    let finished = pool.finish(Duration::from_secs(30)).await;
    drop(pool);
    ran?;
    finished?;
    let state = admin.final_state().await?;
    Ok(report::verdict(&settings, STOCK, &tally, &state))
}

#[tokio::main]
async fn main() {
    let args = Args(std::env::args().skip(1).collect());
    if args.flag("--help") {
        println!("{USAGE}");
        return;
    }
    let outcome = match args.check() {
        Err(e) => Err(e),
        Ok(()) => match args.value("--worker") {
            Ok(Some(index)) => worker_main(&args, &index).await.map(|()| true),
            // Ctrl-C drops the run: its workers (also a stopped one) and servers are killed by PID.
            Ok(None) => tokio::select! {
                passed = orchestrate(&args) => passed,
                _ = tokio::signal::ctrl_c() => Err("interrupted".into()),
            },
            Err(e) => Err(e),
        },
    };
    match outcome {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("flash_sale: error: {e}");
            std::process::exit(2);
        }
    }
}

/// A worker process: its settings from the command line.
async fn worker_main(args: &Args, index: &str) -> Result<(), Error> {
    // Die with the orchestrator, even while stopped (SIGKILL ends a stopped process too).
    // SAFETY: prctl(2) with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    let need = |name: &str| args.value(name)?.ok_or_else(|| Error::from(format!("a worker needs {name}")));
    let settings = Settings {
        zk: need("--zk")?,
        postgres: need("--postgres")?,
        redis: need("--redis")?,
        item: ITEM.into(),
        fenced: !args.flag("--unfenced"),
        session_timeout: SESSION_TIMEOUT,
        margin: MARGIN,
    };
    let index = index.parse().map_err(|_| format!("bad worker index {index:?}"))?;
    worker::run(index, settings).await
}
