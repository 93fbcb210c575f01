//! `zklock`: run a command under a ZooKeeper lock or leadership.

mod child;
mod deadline;
mod exit;
mod ops;
mod progress;
mod status;
mod zk;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand};
use zk_recipes::{LockGuard, LockOptions, LockStatus, NodeFormat, TlsConfig};

use crate::child::{Ended, Safety, Stops};
use crate::exit::Failure;
use crate::progress::Progress;
use crate::zk::{Conn, Contact, Kind, Wait};

const AFTER_HELP: &str = "\
Exit codes:
  the command's own status (128+N if it was killed by signal N), or
    0  hold: released after stdin closed or SIGINT/SIGTERM; elect --observe: ended by a signal
    1  break/revoke: nobody holds the path, or break was not confirmed
   64  bad input: an invalid lock path, a missing `--` before the command, a path holding
       another recipe's or the other --format's nodes, unusable TLS files
   69  ZooKeeper unreachable, session expired, or authentication failed
   75  lock busy (--no-wait) or not acquired within --timeout (or -E N)
   76  lock or leadership lost while the command ran (its group got SIGTERM, then SIGKILL)
  124  run --max-hold passed: the command's group got SIGTERM, then SIGKILL; lock released
  126  the command could not be executed; 127 the command was not found
  130  SIGINT while waiting; 143 SIGTERM while waiting (our queue node deleted first)

Examples:
  export ZK_CONNECT=zk1:PORT,zk2:PORT,zk3:PORT
  zklock run /locks/nightly-report -- ./report.sh --full
  zklock run -c 'make build && make deploy' /locks/deploy
  zklock run --no-wait -E 0 /locks/deploy -- make deploy  # exit 0 if someone deploys now
  zklock run --timeout 30s /locks/db-migrate -- ./migrate
  zklock run --shared /locks/db -- ./read-report          # many readers...
  zklock run --exclusive /locks/db -- ./migrate           # ...or one writer
  zklock run --limit 3 /locks/crawlers -- ./crawl         # at most 3 at once
  coproc zklock hold /locks/batch; read token <&\"${COPROC[0]}\"; ...; kill $COPROC_PID
  zklock status /locks/nightly-report
  zklock ls /locks
  zklock elect --id $(hostname) /election/scheduler -- ./scheduler
  zklock elect --observe /election/scheduler
  zklock revoke /locks/deploy                             # ask the holder to finish
  zklock break /locks/deploy                              # delete the holder's node
  zklock completions bash > /etc/bash_completion.d/zklock; zklock man > zklock.1

The command runs in its own process group and sees ZKLOCK_FENCING_TOKEN (strictly increasing
across holders: pass it to what you write, so that a stale holder's writes can be refused),
ZKLOCK_PATH and ZKLOCK_NODE. On a loss its group gets SIGTERM at once and SIGKILL after --grace,
but never later than the session's safe window minus --kill-margin. If zklock itself is killed,
the command (not its children) gets SIGKILL; only fencing tokens protect against what is left.";

#[derive(Parser)]
#[command(name = "zklock", version, about = "Run a command under a ZooKeeper lock or leadership.", after_help = AFTER_HELP)]
struct Cli {
    /// ZooKeeper connect string, host:port[,host:port...][/chroot].
    #[arg(long, env = "ZK_CONNECT", global = true)]
    connect: Option<String>,
    /// Session timeout to ask for, at least 1ms: how long after zklock dies (or is cut off)
    /// others may take the lock [default: 10s]. The server keeps it within its bounds (by
    /// default 2 to 20 times its tickTime); zklock says so when it got another.
    #[arg(long, value_parser = session_timeout, global = true)]
    session_timeout: Option<Duration>,
    /// Report waiting progress and lock events on stderr even when it is not a terminal.
    #[arg(short, long, global = true)]
    verbose: bool,
    /// Node naming: `curator` (default; shares paths with Curator's recipes) or `kazoo`
    /// (shares paths with kazoo's Lock and Election). The two must never share a path.
    // No default_value on global args: clap would re-apply it at the subcommand and overwrite
    // a value given before the subcommand.
    #[arg(long, global = true)]
    format: Option<NodeFormat>,
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
    /// Acquire LOCKPATH, print the fencing token, and hold until stdin closes or a signal.
    Hold(HoldArgs),
    /// Show the holder and the queue of a lock (or election).
    Status(StatusArgs),
    /// List every lock and election under a prefix, with its holders, how many wait, and age.
    Ls(LsArgs),
    /// Run the command while leader of ELECTPATH (stop it if leadership is lost), or
    /// --observe the leader.
    Elect(ElectArgs),
    /// Ask the holder(s) of LOCKPATH to release (Curator's revocation; the holder decides): a
    /// lock's holder, a semaphore's lease holders, an election's leader.
    Revoke(RevokeArgs),
    /// Delete the holder's node (after confirmation) and print its now-void fencing token.
    Break(BreakArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(CompletionsArgs),
    /// Print the man page (roff) to stdout, e.g. `zklock man > zklock.1`.
    Man,
}

#[derive(Args)]
struct LockArgs {
    /// Give up after this long (exit 75, or -E), e.g. 30s or 500ms.
    #[arg(long, value_parser = humantime::parse_duration, conflicts_with = "no_wait")]
    timeout: Option<Duration>,
    /// Exit 75 (or -E) at once if the lock is held by someone else, as flock -n.
    #[arg(long, short = 'n')]
    no_wait: bool,
    /// The exit code for a busy lock (--no-wait) or a --timeout, as flock -E.
    #[arg(short = 'E', long, value_name = "N")]
    conflict_exit_code: Option<u8>,
    /// Participant id stored in our lock node (default hostname:pid).
    #[arg(long)]
    id: Option<String>,
    /// Take the read (shared) side of the read/write lock, as flock -s: many at once, none
    /// while a writer (--exclusive) holds or waits.
    #[arg(short = 's', long, conflicts_with_all = ["exclusive", "limit"])]
    shared: bool,
    /// Take the write (exclusive) side of the read/write lock, as flock -x.
    #[arg(short = 'x', long, conflicts_with = "limit")]
    exclusive: bool,
    /// A semaphore: at most N holders at once on the path, as consul lock -n. Every holder
    /// must give the same N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    limit: Option<u32>,
    /// When the holder ahead vanished without releasing (its session expired: it may be a
    /// paused process that still writes), wait this much longer before taking the lock, as
    /// Consul's lock-delay. Give it to every zklock on the path: a release without it (or by
    /// Curator or kazoo) counts as unclean. Default: off.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    lock_delay: Option<Duration>,
    /// The lock path, e.g. /locks/orders.
    lockpath: String,
}

impl LockArgs {
    fn kind(&self) -> Kind {
        match (self.shared, self.exclusive, self.limit) {
            (true, _, _) => Kind::Read,
            (_, true, _) => Kind::Write,
            (_, _, Some(n)) => Kind::Limit(n),
            _ => Kind::Mutex,
        }
    }

    fn wait(&self) -> Wait {
        match (self.no_wait, self.timeout) {
            (true, _) => Wait::Try,
            (_, Some(t)) => Wait::For(t),
            _ => Wait::Forever,
        }
    }
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    lock: LockArgs,
    /// How long the command's group gets after SIGTERM before SIGKILL; on a loss, capped by
    /// the session: never later than the safe window minus --kill-margin.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    grace: Duration,
    /// Safety margin before the end of the safe window [default: a tenth of the negotiated
    /// session timeout, at least 200ms].
    #[arg(long, value_parser = humantime::parse_duration)]
    kill_margin: Option<Duration>,
    /// The longest the lock may be held (from its acquisition): when it passes, the command's
    /// group is stopped as on a loss (SIGTERM, SIGKILL after --grace, never later than the safe
    /// window minus --kill-margin), then the lock is released; exit 124.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    max_hold: Option<Duration>,
    /// Run this command string through `sh -c`, as flock -c.
    #[arg(short = 'c', long = "command", value_name = "STRING", conflicts_with = "command")]
    shell: Option<String>,
    /// The command and its arguments, after --.
    #[arg(last = true, num_args = 1.., required_unless_present = "shell")]
    command: Vec<String>,
}

#[derive(Args)]
struct HoldArgs {
    #[command(flatten)]
    lock: LockArgs,
    /// Print the token as JSON (path, node, fencing_token).
    #[arg(long)]
    json: bool,
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
struct LsArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// The prefix to list under (default /).
    #[arg(default_value = "/")]
    prefix: String,
}

#[derive(Args)]
struct ElectArgs {
    /// Participant id (default hostname:pid).
    #[arg(long)]
    id: Option<String>,
    /// How long the command's group gets after SIGTERM before SIGKILL; on a loss, capped by
    /// the session (see run --grace).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    grace: Duration,
    /// Safety margin before the end of the safe window (see run --kill-margin).
    #[arg(long, value_parser = humantime::parse_duration)]
    kill_margin: Option<Duration>,
    /// Do not take part: print the leader and each change, as etcdctl elect -l.
    #[arg(long, short = 'l', conflicts_with_all = ["shell", "command", "id"])]
    observe: bool,
    /// With --observe: print one JSON object per line.
    #[arg(long, requires = "observe")]
    json: bool,
    /// Run this command string through `sh -c`.
    #[arg(short = 'c', long = "command", value_name = "STRING", conflicts_with = "command")]
    shell: Option<String>,
    /// The election path, e.g. /election/scheduler.
    electpath: String,
    /// The command and its arguments, after --.
    #[arg(last = true, num_args = 1.., required_unless_present_any = ["shell", "observe"])]
    command: Vec<String>,
}

#[derive(Args)]
struct RevokeArgs {
    /// Ask only this queue node (its name or full path), e.g. one of a semaphore's lease
    /// holders; default: every holder (a lock's, each lease holder of a semaphore, an
    /// election's leader).
    #[arg(long)]
    node: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// The lock, semaphore or election path.
    lockpath: String,
}

#[derive(Args)]
struct BreakArgs {
    /// The queue node to delete (its name or full path); default: the holder's.
    #[arg(long)]
    node: Option<String>,
    /// Do not ask for confirmation.
    #[arg(long, short = 'y')]
    yes: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// The lock path.
    lockpath: String,
}

#[derive(Args)]
struct CompletionsArgs {
    /// The shell.
    shell: clap_complete::Shell,
}

impl Cli {
    fn format(&self) -> NodeFormat {
        self.format.unwrap_or_default()
    }

    /// Connects, and says on stderr when the server set another session timeout than the one
    /// asked for (always for a `--session-timeout` given, with `-v` for the default).
    async fn connect(&self) -> Result<Conn, Failure> {
        let conn = zk::connect(zk::Target {
            connect: self.connect.as_deref(),
            session_timeout: self.session_timeout,
            tls: tls(self)?,
        })
        .await?;
        let asked = self.session_timeout.unwrap_or(zk::DEFAULT_SESSION_TIMEOUT);
        let got = conn.session().session_timeout();
        // ZooKeeper counts whole milliseconds: 1.5005s asked is 1.5s asked.
        if got != Duration::from_millis(asked.as_millis() as u64)
            && (self.session_timeout.is_some() || self.verbose)
        {
            let default = if self.session_timeout.is_none() { "the default " } else { "" };
            eprintln!(
                "zklock: note: the server set the session timeout to {} (asked for {default}{})",
                humantime::format_duration(got),
                humantime::format_duration(asked)
            );
        }
        Ok(conn)
    }
}

/// The longest session timeout ZooKeeper can carry: its field is a signed 32-bit count of
/// milliseconds (about 24.8 days).
const MAX_SESSION_TIMEOUT: Duration = Duration::from_millis(i32::MAX as u64);

/// Parses `--session-timeout`: a duration of at least 1ms and at most `MAX_SESSION_TIMEOUT`.
/// Zero would silently become the client's default (6s), and less than a millisecond is zero
/// in ZooKeeper's millisecond field.
fn session_timeout(text: &str) -> Result<Duration, String> {
    let timeout = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if timeout < Duration::from_millis(1) {
        return Err(
            "a session timeout must be at least 1ms (ZooKeeper counts it in whole milliseconds)".into()
        );
    }
    if timeout > MAX_SESSION_TIMEOUT {
        return Err(format!(
            "a session timeout must be at most {}ms (ZooKeeper's limit, about 24 days)",
            MAX_SESSION_TIMEOUT.as_millis()
        ));
    }
    Ok(timeout)
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

/// Acquires the lock `args` describe, with progress and with SIGINT/SIGTERM deleting our queue
/// node before exit. `Err` with the exit code for busy, timeout or a signal.
async fn acquire(
    cli: &Cli,
    conn: &Conn,
    args: &LockArgs,
    stops: &mut Stops,
) -> Result<(zk::Lock, LockGuard), Failure> {
    let id = args.id.clone().unwrap_or_else(zk_recipes::default_participant_id);
    let mut options = LockOptions::new().participant_id(id.clone()).format(cli.format());
    if let Some(delay) = args.lock_delay {
        options = options.lock_delay(delay);
    }
    zk::refuse_other_recipes(conn, &args.lockpath, args.kind(), cli.format()).await?;
    let lock = zk::lock(conn, &args.lockpath, args.kind(), options)?;
    let progress = Progress::new(cli.verbose);
    let mut report = |event: &zk_recipes::QueueEvent| progress.event(&args.lockpath, event);
    let waiting = lock.acquire(args.wait(), &mut report);
    let got = tokio::select! {
        got = waiting => got?,
        code = stops.next() => {
            progress.done();
            // The acquire future is dropped: our node is deleted in the background. Wait for
            // it, so that nobody waits behind a node of ours until the session times out.
            lock.settled().await;
            return Err(Failure::silent(code));
        }
    };
    let Some(guard) = got else {
        let holder = lock
            .participants()
            .await
            .ok()
            .and_then(|q| q.first().map(|p| p.id.clone()))
            .unwrap_or_else(|| "?".into());
        let why = if args.no_wait { "is busy" } else { "was not acquired in time" };
        return Err(Failure::new(
            args.conflict_exit_code.unwrap_or(exit::BUSY),
            format!("{} {why} (held by {holder})", args.lockpath),
        ));
    };
    let stats = lock.stats();
    progress.note(&format!(
        "zklock: acquired {} after {} listing(s) of the queue and {} wake-up(s)",
        args.lockpath, stats.listings, stats.wakeups
    ));
    Ok((lock, guard))
}

/// The margin and the warning at start when the negotiated timeout leaves no grace.
fn margin(contact: &Contact, given: Option<Duration>) -> Duration {
    let timeout = contact.session_timeout();
    let margin = given.unwrap_or_else(|| deadline::default_margin(timeout));
    if deadline::best_grace(timeout, margin).is_zero() {
        eprintln!(
            "zklock: warning: the negotiated session timeout ({}) leaves no grace: on a loss the \
             command will be killed at once (SIGKILL)",
            humantime::format_duration(timeout)
        );
    }
    margin
}

fn command_of(shell: &Option<String>, command: &[String]) -> Vec<String> {
    match shell {
        Some(line) => vec!["sh".into(), "-c".into(), line.clone()],
        None => command.to_vec(),
    }
}

async fn run(cli: &Cli, args: &RunArgs) -> Result<u8, Failure> {
    let mut stops = Stops::new()?;
    let conn = cli.connect().await?;
    let (_lock, guard) = acquire(cli, &conn, &args.lock, &mut stops).await?;
    // `--max-hold` counts from the acquisition, whatever comes before the command starts.
    let limit_at = args.max_hold.map(|limit| tokio::time::Instant::now() + limit);
    let path = &args.lock.lockpath;
    let contact = match Contact::start(&conn).await {
        Ok(contact) => contact,
        Err(e) => {
            let _ = guard.release().await;
            return Err(e);
        }
    };
    let margin = margin(&contact, args.kill_margin);
    let token = guard.fencing_token();
    Progress::new(cli.verbose).note(&format!("zklock: holding {path} (fencing token {token})"));
    let env = [
        ("ZKLOCK_FENCING_TOKEN", token.to_string()),
        ("ZKLOCK_PATH", path.clone()),
        ("ZKLOCK_NODE", guard.node_path().to_string()),
    ];
    // A signal that came while we took the lock: release, do not start the command.
    if let Some(code) = stops.arrived().await {
        let _ = guard.release().await;
        return Err(Failure::silent(code));
    }
    let group = match child::start(&command_of(&args.shell, &args.command), &env) {
        Ok(group) => group,
        Err(e) => {
            let _ = guard.release().await;
            return Err(e);
        }
    };
    let safe_until = || guard.safe_until();
    let mut status = guard.status();
    let revoked = async move {
        let _ = status.wait_for(|s| *s == LockStatus::RevocationRequested).await;
    };
    let safety = Safety { grace: args.grace, margin, safe_until: &safe_until, contact: contact.clone() };
    // The limit stops the command as a loss does, while the lock is still ours; the release
    // below then admits the next waiter, once the command's group is gone.
    let limit_passed = std::sync::atomic::AtomicBool::new(false);
    let lost = async {
        tokio::select! {
            () = guard.lost() => {}
            () = tokio::time::sleep_until(limit_at.unwrap_or_else(tokio::time::Instant::now)), if limit_at.is_some() => {
                limit_passed.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
    };
    let ended = child::supervise(group, lost, revoked, safety, stops).await?;
    let released = guard.release().await;
    let limit_passed = limit_passed.load(std::sync::atomic::Ordering::SeqCst);
    match (ended, released) {
        (Ended::Lost, Ok(())) if limit_passed => Err(Failure::new(
            exit::MAX_HOLD,
            format!(
                "held {path} for --max-hold {}; stopped the command and released the lock",
                humantime::format_duration(args.max_hold.unwrap_or_default())
            ),
        )),
        (Ended::Lost, _) => Err(Failure::new(
            exit::LOST,
            format!("lost the lock on {path} while the command ran; stopped it"),
        )),
        (Ended::WindowSpent, _) => Err(window_spent(path)),
        (Ended::Exited(_), Err(zk_recipes::Error::LockLost { .. })) => Err(Failure::new(
            exit::LOST,
            format!("the lock on {path} was lost before the command ended; it may have run unprotected"),
        )),
        (Ended::Exited(code), Err(e)) => {
            eprintln!("zklock: releasing {path}: {e}");
            Ok(code)
        }
        (Ended::Exited(code), Ok(())) => Ok(code),
    }
}

#[derive(serde::Serialize)]
struct Held<'a> {
    path: &'a str,
    node: &'a str,
    fencing_token: u64,
}

async fn hold(cli: &Cli, args: &HoldArgs) -> Result<u8, Failure> {
    use std::io::Write;
    use tokio::io::AsyncReadExt;
    let mut stops = Stops::new()?;
    let conn = cli.connect().await?;
    let (_lock, guard) = acquire(cli, &conn, &args.lock, &mut stops).await?;
    let path = &args.lock.lockpath;
    let held = Held { path, node: guard.node_path(), fencing_token: guard.fencing_token() };
    if args.json {
        status::print_json(&held)?;
    } else {
        println!("{}", held.fencing_token);
    }
    let _ = std::io::stdout().flush();
    let stdin_closed = async {
        let mut stdin = tokio::io::stdin();
        let mut buf = [0u8; 4096];
        while matches!(stdin.read(&mut buf).await, Ok(n) if n > 0) {}
    };
    let mut status = guard.status();
    let revoked = status.wait_for(|s| *s == LockStatus::RevocationRequested);
    let lost = tokio::select! {
        _ = stdin_closed => false,
        _ = stops.next() => false,
        _ = revoked => {
            eprintln!("zklock: revocation requested; releasing {path}");
            false
        }
        _ = guard.lost() => true,
    };
    if lost {
        drop(guard);
        return Err(Failure::new(exit::LOST, format!("lost the lock on {path}")));
    }
    match guard.release().await {
        Ok(()) => Ok(0),
        Err(zk_recipes::Error::LockLost { .. }) => {
            Err(Failure::new(exit::LOST, format!("the lock on {path} was lost before release")))
        }
        Err(e) => Err(e.into()),
    }
}

async fn elect(cli: &Cli, args: &ElectArgs) -> Result<u8, Failure> {
    let conn = cli.connect().await?;
    if args.observe {
        return ops::observe(&conn, &args.electpath, cli.format(), args.json).await;
    }
    let mut stops = Stops::new()?;
    let id = args.id.clone().unwrap_or_else(zk_recipes::default_participant_id);
    let latch = zk::latch(&conn, &args.electpath, &id, cli.format())?;
    latch.start()?;
    let progress = Progress::new(cli.verbose);
    let waiting = progress.while_waiting(
        &args.electpath,
        &id,
        latch.await_leadership(),
        || latch.participants(),
        conn.raw()?,
    );
    let token = tokio::select! {
        token = waiting => token?,
        code = stops.next() => {
            progress.done();
            latch.close().await;
            return Err(Failure::silent(code));
        }
    };
    let contact = match Contact::start(&conn).await {
        Ok(contact) => contact,
        Err(e) => {
            latch.close().await;
            return Err(e);
        }
    };
    let margin = margin(&contact, args.kill_margin);
    progress.note(&format!("zklock: leading {} as {id} (fencing token {token})", args.electpath));
    let env = [("ZKLOCK_FENCING_TOKEN", token.to_string()), ("ZKLOCK_PATH", args.electpath.clone())];
    if let Some(code) = stops.arrived().await {
        latch.close().await;
        return Err(Failure::silent(code));
    }
    let group = match child::start(&command_of(&args.shell, &args.command), &env) {
        Ok(group) => group,
        Err(e) => {
            latch.close().await;
            return Err(e);
        }
    };
    let mut changes = latch.leadership();
    let lost = async move {
        let _ = changes.wait_for(|l| *l == zk_recipes::Leadership::NotLeader).await;
    };
    // A revocation request (`zklock revoke`) is passed on to the command as SIGTERM, as `run`
    // does; the latch leads until the command exits.
    let mut revocation = latch.revocation();
    let revoked = async move {
        let _ = revocation.wait_for(|asked| *asked).await;
    };
    let safe_until = || if latch.has_leadership() { contact.session_safe_until() } else { None };
    let safety = Safety { grace: args.grace, margin, safe_until: &safe_until, contact: contact.clone() };
    let ended = child::supervise(group, lost, revoked, safety, stops).await?;
    latch.close().await;
    match ended {
        Ended::Lost => Err(Failure::new(
            exit::LOST,
            format!("lost leadership of {} while the command ran; stopped it", args.electpath),
        )),
        Ended::WindowSpent => Err(window_spent(&args.electpath)),
        Ended::Exited(code) => Ok(code),
    }
}

fn window_spent(path: &str) -> Failure {
    Failure::new(
        exit::LOST,
        format!(
            "no reply from ZooKeeper vouched for holding {path} any more (the session's safe window \
             ran out); stopped the command"
        ),
    )
}

/// Parses the arguments. Every usage error is one line on stderr and exit 64 (EX_USAGE), not
/// clap's 2; a missing `--` before the command says so.
fn parse() -> Result<Cli, ExitCode> {
    let error = match Cli::try_parse() {
        Ok(cli) => return Ok(cli),
        Err(error) => error,
    };
    use clap::error::ErrorKind as K;
    if matches!(
        error.kind(),
        K::DisplayHelp | K::DisplayVersion | K::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = error.print();
        return Err(if error.kind() == K::DisplayHelpOnMissingArgumentOrSubcommand {
            ExitCode::from(exit::USAGE)
        } else {
            ExitCode::SUCCESS
        });
    }
    let rendered = error.to_string();
    // The first paragraph, on one line ("... not provided: <LOCKPATH>").
    let paragraph: Vec<&str> = rendered.lines().take_while(|l| !l.trim().is_empty()).map(str::trim).collect();
    let mut line = paragraph.join(" ").trim_start_matches("error: ").to_string();
    if line.is_empty() {
        line = "bad arguments (see zklock --help)".into();
    }
    // clap's "did you mean" tips, on the same line.
    let (similar, other) = tips(&error);
    for tip in similar.iter().chain(&other) {
        line.push_str(&format!(" (tip: {tip})"));
    }
    // `run` or `elect` without `--`: say where the command goes (unless the word is a
    // misspelt option of ours).
    let args: Vec<String> = std::env::args().skip(1).collect();
    let takes_command = args.iter().any(|a| a == "run" || a == "elect") && !args.iter().any(|a| a == "--");
    if takes_command
        && similar.is_empty()
        && matches!(error.kind(), K::UnknownArgument | K::TooManyValues | K::MissingRequiredArgument)
    {
        line.push_str(" (the command goes after --: zklock run LOCKPATH -- COMMAND [ARGS...], or -c STRING)");
    }
    Err(Failure::new(exit::USAGE, line).report())
}

/// clap's tips for an error, worded as clap words them: first the similar subcommands,
/// arguments and values ("a similar argument exists: '--connect'"), then the others ("'run
/// --no-wait' exists"), less "to pass 'X' as a value, use '-- X'": where a command goes after
/// `--` is said by `parse`, and no other zklock argument takes such a value.
fn tips(error: &clap::Error) -> (Vec<String>, Vec<String>) {
    use clap::error::{ContextKind as C, ContextValue as V};
    let mut similar = Vec::new();
    for (kind, what) in
        [(C::SuggestedSubcommand, "subcommand"), (C::SuggestedArg, "argument"), (C::SuggestedValue, "value")]
    {
        let names = match error.get(kind) {
            Some(V::String(name)) => vec![name.clone()],
            Some(V::Strings(names)) => names.clone(),
            _ => continue,
        };
        let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
        match quoted.len() {
            0 => {}
            1 => similar.push(format!("a similar {what} exists: {}", quoted[0])),
            _ => similar.push(format!("some similar {what}s exist: {}", quoted.join(", "))),
        }
    }
    let other = match error.get(C::Suggested) {
        Some(V::StyledStrs(tips)) => {
            tips.iter().map(ToString::to_string).filter(|t| !t.starts_with("to pass ")).collect()
        }
        _ => Vec::new(),
    };
    (similar, other)
}

fn main() -> ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    match &cli.command {
        Command::Completions(args) => {
            clap_complete::generate(args.shell, &mut Cli::command(), "zklock", &mut std::io::stdout());
            return ExitCode::SUCCESS;
        }
        Command::Man => {
            return match clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                Err(e) => Failure::new(exit::UNAVAILABLE, format!("writing the man page: {e}")).report(),
            };
        }
        _ => {}
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return Failure::new(exit::UNAVAILABLE, format!("starting the runtime: {e}")).report(),
    };
    let outcome = runtime.block_on(async {
        match &cli.command {
            Command::Run(args) => run(&cli, args).await,
            Command::Hold(args) => hold(&cli, args).await,
            Command::Status(args) => {
                let conn = cli.connect().await?;
                status::show(&conn, &args.lockpath, cli.format(), args.json).await.map(|()| 0)
            }
            Command::Ls(args) => {
                let conn = cli.connect().await?;
                status::ls(&conn, &args.prefix, cli.format(), args.json).await.map(|()| 0)
            }
            Command::Elect(args) => elect(&cli, args).await,
            Command::Revoke(args) => {
                let conn = cli.connect().await?;
                ops::revoke(&conn, &args.lockpath, cli.format(), args.node.as_deref(), args.json).await
            }
            Command::Break(args) => {
                let conn = cli.connect().await?;
                ops::break_lock(
                    &conn,
                    &args.lockpath,
                    cli.format(),
                    args.node.as_deref(),
                    args.yes,
                    args.json,
                )
                .await
            }
            Command::Completions(_) | Command::Man => Ok(0),
        }
    });
    // A pending read of stdin (hold) must not keep the process alive.
    runtime.shutdown_background();
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(failure) => failure.report(),
    }
}
