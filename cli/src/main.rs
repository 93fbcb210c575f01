//! `zklock`: run a command under a ZooKeeper lock or leadership.

mod child;
mod exit;
mod progress;
mod status;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use zk_recipes::{
    ConnectOptions, InterProcessMutex, LatchOptions, LeaderLatch, Leadership, LockOptions, TlsConfig,
};

use crate::child::Ended;
use crate::exit::Failure;
use crate::progress::Progress;

const AFTER_HELP: &str = "\
Exit codes:
  the command's own status (128+N if it was killed by signal N), or
   64  bad input (an invalid lock path, a path holding the other --format's nodes, or unusable
       TLS files)
   69  ZooKeeper unreachable, session expired, or authentication failed
   75  lock busy (--no-wait) or not acquired within --timeout
   76  lock or leadership lost while the command ran (it was sent SIGTERM, then SIGKILL)
  126  the command could not be executed; 127 the command was not found

Examples:
  export ZK_CONNECT=zk1:PORT,zk2:PORT,zk3:PORT
  zklock run /locks/nightly-report -- ./report.sh --full
  zklock run --no-wait /locks/deploy -- make deploy       # exit 75 if someone deploys now
  zklock run --timeout 30s /locks/db-migrate -- ./migrate
  zklock status /locks/nightly-report
  zklock status --json /locks/nightly-report
  zklock elect --id $(hostname) /election/scheduler -- ./scheduler
  zklock --format kazoo run /locks/shared-with-python -- ./job   # beside kazoo's Lock
  zklock --tls-ca ca.pem --connect zk1:SECUREPORT run /locks/x -- ./job   # TLS
  zklock --tls-ca ca.pem --tls-cert me.pem --tls-key me.key ...           # mutual TLS

The command sees ZKLOCK_FENCING_TOKEN (strictly increasing across holders: pass it to what you
write, so that a stale holder's writes can be refused), ZKLOCK_PATH and ZKLOCK_NODE. If zklock dies,
the command gets SIGTERM.";

#[derive(Parser)]
#[command(name = "zklock", version, about = "Run a command under a ZooKeeper lock or leadership.", after_help = AFTER_HELP)]
struct Cli {
    /// ZooKeeper connect string, host:port[,host:port...][/chroot].
    #[arg(long, env = "ZK_CONNECT", global = true)]
    connect: Option<String>,
    /// Session timeout: how long after zklock dies (or is cut off) others may take the lock
    /// [default: 10s].
    #[arg(long, value_parser = humantime::parse_duration, global = true)]
    session_timeout: Option<Duration>,
    /// Report waiting progress and lock events on stderr even when it is not a terminal.
    #[arg(short, long, global = true)]
    verbose: bool,
    /// Node naming: `curator` (default; shares paths with Curator's recipes) or `kazoo`
    /// (shares paths with kazoo's Lock and Election). The two must never share a path.
    // No default_value on global args: clap would re-apply it at the subcommand and overwrite
    // a value given before the subcommand.
    #[arg(long, global = true)]
    format: Option<zk_recipes::NodeFormat>,
    /// TLS: trust the CA certificates in this PEM file and connect to the servers' secure
    /// client ports (`secureClientPort`). Their certificates must name the hosts as written in
    /// --connect.
    #[arg(long, env = "ZK_TLS_CA", global = true, value_name = "PEM")]
    tls_ca: Option<PathBuf>,
    /// Mutual TLS: present this client certificate (PEM); needs --tls-key and --tls-ca.
    #[arg(long, env = "ZK_TLS_CERT", global = true, value_name = "PEM")]
    tls_cert: Option<PathBuf>,
    /// Mutual TLS: the private key (PEM) of --tls-cert.
    #[arg(long, env = "ZK_TLS_KEY", global = true, value_name = "PEM")]
    tls_key: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Acquire LOCKPATH, run the command while holding it, then release.
    Run(RunArgs),
    /// Show the holder and the queue of a lock (or election).
    Status(StatusArgs),
    /// Run the command while leader of ELECTPATH; stop it if leadership is lost.
    Elect(ElectArgs),
}

#[derive(Args)]
struct RunArgs {
    /// Give up after this long (exit 75), e.g. 30s or 500ms.
    #[arg(long, value_parser = humantime::parse_duration, conflicts_with = "no_wait")]
    timeout: Option<Duration>,
    /// Exit 75 at once if the lock is held by someone else, as flock -n.
    #[arg(long, short = 'n')]
    no_wait: bool,
    /// Participant id stored in our lock node (default hostname:pid).
    #[arg(long)]
    id: Option<String>,
    /// How long the command gets to exit after SIGTERM before SIGKILL.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    grace: Duration,
    /// The lock path, e.g. /locks/orders.
    lockpath: String,
    /// The command and its arguments, after --.
    #[arg(last = true, required = true, num_args = 1..)]
    command: Vec<String>,
}

#[derive(Args)]
struct StatusArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// The lock or election path.
    lockpath: String,
}

#[derive(Args)]
struct ElectArgs {
    /// Participant id (default hostname:pid).
    #[arg(long)]
    id: Option<String>,
    /// How long the command gets to exit after SIGTERM before SIGKILL.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    grace: Duration,
    /// The election path, e.g. /election/scheduler.
    electpath: String,
    /// The command and its arguments, after --.
    #[arg(last = true, required = true, num_args = 1..)]
    command: Vec<String>,
}

async fn connect(cli: &Cli) -> Result<zk_recipes::zookeeper_client::Client, Failure> {
    let connect = cli.connect.as_deref().ok_or_else(|| {
        Failure::new(exit::USAGE, "no ZooKeeper to talk to: pass --connect or set ZK_CONNECT")
    })?;
    let mut options = ConnectOptions::new(cli.session_timeout.unwrap_or(Duration::from_secs(10)));
    if let Some(tls) = tls(cli)? {
        options = options.tls(tls);
    }
    Ok(zk_recipes::connect_with(connect, &options).await?)
}

/// The TLS settings the flags ask for, if any.
fn tls(cli: &Cli) -> Result<Option<TlsConfig>, Failure> {
    let usage = |message: &str| Failure::new(exit::USAGE, message);
    let identity = match (&cli.tls_cert, &cli.tls_key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => return Err(usage("--tls-cert and --tls-key go together")),
    };
    let Some(ca) = &cli.tls_ca else {
        return match identity {
            Some(_) => Err(usage("--tls-cert needs --tls-ca (the CA that signed the servers' certificates)")),
            None => Ok(None),
        };
    };
    let mut tls = TlsConfig::from_ca_file(ca)?;
    if let Some((cert, key)) = identity {
        tls = tls.with_identity_files(cert, key)?;
    }
    Ok(Some(tls))
}

async fn run(cli: &Cli, args: &RunArgs) -> Result<u8, Failure> {
    let client = connect(cli).await?;
    let id = args.id.clone().unwrap_or_else(zk_recipes::default_participant_id);
    let options = LockOptions::new().participant_id(id.clone()).format(cli.format.unwrap_or_default());
    let mutex = InterProcessMutex::with_options(client, &args.lockpath, options)?;
    let progress = Progress::new(cli.verbose);
    let acquiring = async {
        if args.no_wait {
            mutex.try_acquire().await
        } else if let Some(timeout) = args.timeout {
            mutex.acquire_timeout(timeout).await
        } else {
            mutex.acquire().await.map(Some)
        }
    };
    let waiting = progress.while_waiting(&args.lockpath, &id, acquiring, || mutex.participants());
    let guard = tokio::select! {
        got = waiting => got?,
        _ = tokio::signal::ctrl_c() => {
            mutex.settled().await;
            return Ok(130);
        }
    };
    let Some(guard) = guard else {
        let holder = mutex
            .participants()
            .await
            .ok()
            .and_then(|q| q.first().map(|p| p.id.clone()))
            .unwrap_or_else(|| "?".into());
        let why = if args.no_wait { "is busy" } else { "was not acquired in time" };
        return Err(Failure::new(exit::BUSY, format!("{} {why} (held by {holder})", args.lockpath)));
    };
    let token = guard.fencing_token();
    progress.note(&format!("zklock: holding {} (fencing token {token})", args.lockpath));
    let env = [
        ("ZKLOCK_FENCING_TOKEN", token.to_string()),
        ("ZKLOCK_PATH", args.lockpath.clone()),
        ("ZKLOCK_NODE", guard.node_path().to_string()),
    ];
    let child = match child::start(&args.command, &env) {
        Ok(child) => child,
        Err(e) => {
            let _ = guard.release().await;
            return Err(e);
        }
    };
    let ended = child::supervise(child, guard.lost(), args.grace).await?;
    let released = guard.release().await;
    match (ended, released) {
        (Ended::Lost, _) => Err(Failure::new(
            exit::LOST,
            format!("lost the lock on {} while the command ran; stopped it", args.lockpath),
        )),
        (Ended::Exited(_), Err(zk_recipes::Error::LockLost { .. })) => Err(Failure::new(
            exit::LOST,
            format!(
                "the lock on {} was lost before the command ended; it may have run unprotected",
                args.lockpath
            ),
        )),
        (Ended::Exited(code), Err(e)) => {
            eprintln!("zklock: releasing {}: {e}", args.lockpath);
            Ok(code)
        }
        (Ended::Exited(code), Ok(())) => Ok(code),
    }
}

async fn elect(cli: &Cli, args: &ElectArgs) -> Result<u8, Failure> {
    let client = connect(cli).await?;
    let id = args.id.clone().unwrap_or_else(zk_recipes::default_participant_id);
    let latch = LeaderLatch::with_options(
        client,
        &args.electpath,
        &id,
        LatchOptions::new().format(cli.format.unwrap_or_default()),
    )?;
    latch.start()?;
    let progress = Progress::new(cli.verbose);
    let waiting =
        progress.while_waiting(&args.electpath, &id, latch.await_leadership(), || latch.participants());
    let token = tokio::select! {
        token = waiting => token?,
        _ = tokio::signal::ctrl_c() => {
            latch.close().await;
            return Ok(130);
        }
    };
    progress.note(&format!("zklock: leading {} as {id} (fencing token {token})", args.electpath));
    let env = [("ZKLOCK_FENCING_TOKEN", token.to_string()), ("ZKLOCK_PATH", args.electpath.clone())];
    let child = match child::start(&args.command, &env) {
        Ok(child) => child,
        Err(e) => {
            latch.close().await;
            return Err(e);
        }
    };
    let mut changes = latch.leadership();
    let lost = async move {
        let _ = changes.wait_for(|l| *l == Leadership::NotLeader).await;
    };
    let ended = child::supervise(child, lost, args.grace).await?;
    latch.close().await;
    match ended {
        Ended::Lost => Err(Failure::new(
            exit::LOST,
            format!("lost leadership of {} while the command ran; stopped it", args.electpath),
        )),
        Ended::Exited(code) => Ok(code),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return Failure::new(exit::UNAVAILABLE, format!("starting the runtime: {e}")).report(),
    };
    let outcome = runtime.block_on(async {
        match &cli.command {
            Command::Run(args) => run(&cli, args).await,
            Command::Status(args) => {
                let client = connect(&cli).await?;
                status::show(client, &args.lockpath, cli.format.unwrap_or_default(), args.json)
                    .await
                    .map(|()| 0)
            }
            Command::Elect(args) => elect(&cli, args).await,
        }
    });
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(failure) => failure.report(),
    }
}
