//! The command line: every subcommand and option, as clap derives them (`--help`, the
//! completions and the man pages all come from here).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use zk_recipes::NodeFormat;

use crate::zk::{Kind, Wait};

#[derive(Parser)]
#[command(name = "zklock", version, about = "Run a command under a ZooKeeper lock or leadership.")]
pub struct Cli {
    /// ZooKeeper connect string, host:port[,host:port...][/chroot].
    // Also the `--help` text, which shows the brackets as written: not links.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long, env = "ZK_CONNECT", global = true)]
    pub connect: Option<String>,
    /// Session timeout to ask for, at least 1ms: how long after zklock dies (or is cut off)
    /// others may take the lock [default: 10s]. The server keeps it within its bounds (by
    /// default 2 to 20 times its tickTime); zklock says so when it got another.
    #[arg(long, env = "ZKLOCK_SESSION_TIMEOUT", value_parser = session_timeout, global = true)]
    pub session_timeout: Option<Duration>,
    /// Report waiting progress and lock events on stderr even when it is not a terminal.
    #[arg(short, long, global = true)]
    pub verbose: bool,
    /// The longest connecting may take before zklock gives up (exit 69) [default: the session
    /// timeout, at least 2s; with nothing listening, a fifth less (8s of the default 10s)].
    /// `run` and `hold` also bound connecting by their --timeout.
    #[arg(
        long,
        env = "ZKLOCK_CONNECT_TIMEOUT",
        value_name = "DURATION",
        value_parser = duration,
        global = true
    )]
    pub connect_timeout: Option<Duration>,
    /// Digest authentication, USER:PASSWORD, sent on every connection (ZooKeeper's `addauth
    /// digest`). Needed to reach nodes whose ACL admits only that user.
    #[arg(
        long,
        env = "ZK_AUTH",
        hide_env_values = true,
        value_name = "USER:PASSWORD",
        value_parser = digest,
        global = true
    )]
    pub auth: Option<String>,
    /// How log events are written to stderr: `text` or `json` (one object per line). Which
    /// events: RUST_LOG (default: warn). Never on stdout.
    #[arg(long, env = "ZKLOCK_LOG_FORMAT", value_name = "FORMAT", global = true)]
    pub log_format: Option<LogFormat>,
    /// Node naming: `curator` (default; shares paths with Curator's recipes) or `kazoo`
    /// (shares paths with kazoo's Lock and Election). The two must never share a path.
    // No default_value on global args: clap would re-apply it at the subcommand and overwrite
    // a value given before the subcommand.
    #[arg(long, env = "ZKLOCK_FORMAT", global = true)]
    pub format: Option<NodeFormat>,
    /// TLS: trust the CA certificates in this PEM file and connect to the servers' secure
    /// client ports (`secureClientPort`). Their certificates must name the hosts as written in
    /// --connect.
    #[arg(long, env = "ZK_TLS_CA", global = true, value_name = "PEM")]
    pub tls_ca: Option<PathBuf>,
    /// Mutual TLS: present this client certificate (PEM); needs --tls-key and --tls-ca.
    #[arg(long, env = "ZK_TLS_CERT", global = true, value_name = "PEM")]
    pub tls_cert: Option<PathBuf>,
    /// Mutual TLS: the private key (PEM) of --tls-cert.
    #[arg(long, env = "ZK_TLS_KEY", global = true, value_name = "PEM")]
    pub tls_key: Option<PathBuf>,
    #[command(flatten)]
    pub sasl: crate::sasl::SaslArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
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
    /// Find deadlocks under ROOT: parties that wait for each other in lock queues (exit 1
    /// when found, 0 when none). Reads only. A party is a session, or the sessions its nodes
    /// tie together: a zklock run inside another's command, a script's `zklock hold` coprocess
    /// with its other zklocks (see zklock.md for the rule and its limits).
    Deadlocks(DeadlocksArgs),
    /// A live view of every lock under ROOT: holders, waiters, hold ages, deadlocks.
    Top(TopArgs),
    /// Show how long ago the last `run --once-per` success on LOCKPATH was (its marker), or
    /// --clear the marker so that the next run runs at once.
    OncePer(OncePerArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(CompletionsArgs),
    /// Print the man page zklock(1) (roff) to stdout, or write every page (zklock(1) and one
    /// per subcommand, zklock-run(1)...) into a directory with --dir.
    Man(ManArgs),
}

#[derive(Args)]
pub struct LockArgs {
    /// Give up after this long (exit 75, or -E), e.g. 30s, 500ms or 5 (seconds), counted from
    /// the start: connecting too (exit 69 if not connected by then). With --no-wait, it bounds
    /// connecting only.
    #[arg(long, value_parser = duration)]
    pub timeout: Option<Duration>,
    /// Exit 75 (or -E) at once if the lock is held by someone else, as flock -n.
    #[arg(long, short = 'n')]
    pub no_wait: bool,
    /// The exit code for a busy lock (--no-wait) or a --timeout, as flock -E.
    #[arg(short = 'E', long, value_name = "N")]
    pub conflict_exit_code: Option<u8>,
    /// Participant id stored in our lock node (default hostname:pid).
    #[arg(long)]
    pub id: Option<String>,
    /// Take the read (shared) side of the read/write lock, as flock -s: many at once, none
    /// while a writer (--exclusive) holds or waits.
    #[arg(short = 's', long, conflicts_with_all = ["exclusive", "limit"])]
    pub shared: bool,
    /// Take the write (exclusive) side of the read/write lock, as flock -x.
    #[arg(short = 'x', long, conflicts_with = "limit")]
    pub exclusive: bool,
    /// A semaphore: at most N holders at once on the path, as consul lock -n. Every holder
    /// must give the same N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,
    /// When the holder ahead vanished without releasing (its session expired: it may be a
    /// paused process that still writes), wait this much longer before taking the lock, as
    /// Consul's lock-delay. Give it to every zklock on the path: a release without it (or by
    /// Curator or kazoo) counts as unclean. Default: off.
    #[arg(long, env = "ZKLOCK_LOCK_DELAY", value_name = "DURATION", value_parser = duration)]
    pub lock_delay: Option<Duration>,
    /// Keep the lock at least this long from its acquisition, even when the command ends (or,
    /// for hold, stdin closes) earlier, as ShedLock's lockAtLeastFor: cron on several hosts
    /// with skewed clocks then finds it taken (--no-wait: exit 75). At most --max-hold. A loss
    /// or a revocation ends it at once, as does SIGINT/SIGTERM while it lasts; it is not a
    /// safety property.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub min_hold: Option<Duration>,
    /// The lock path, e.g. /locks/orders.
    pub lockpath: String,
}

impl LockArgs {
    pub fn kind(&self) -> Kind {
        match (self.shared, self.exclusive, self.limit) {
            (true, _, _) => Kind::Read,
            (_, true, _) => Kind::Write,
            (_, _, Some(n)) => Kind::Limit(n),
            _ => Kind::Mutex,
        }
    }

    /// How long to wait for the lock, `elapsed` after the start (connecting counts against
    /// --timeout): a try once --timeout has passed.
    pub fn wait(&self, elapsed: Duration) -> Wait {
        match (self.no_wait, self.timeout) {
            (true, _) => Wait::Try,
            (_, Some(t)) if t > elapsed => Wait::For(t - elapsed),
            (_, Some(_)) => Wait::Try,
            _ => Wait::Forever,
        }
    }
}

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub lock: LockArgs,
    /// How long the command's group gets after SIGTERM before SIGKILL; on a loss, capped by
    /// the session: never later than the safe window minus --kill-margin.
    #[arg(long, env = "ZKLOCK_GRACE", default_value = "5s", value_parser = duration)]
    pub grace: Duration,
    /// Safety margin before the end of the safe window [default: a tenth of the negotiated
    /// session timeout, at least 200ms].
    #[arg(long, env = "ZKLOCK_KILL_MARGIN", value_parser = duration)]
    pub kill_margin: Option<Duration>,
    /// Run the command at most once per PERIOD across every host: a successful run (exit 0)
    /// is recorded under the lock path (a fenced write), and a run within PERIOD of it, by
    /// the server's clock, is skipped: exit 79.
    #[arg(long, value_name = "PERIOD", value_parser = duration, conflicts_with_all = ["shared", "limit"])]
    pub once_per: Option<Duration>,
    /// Keep the command running through a disconnect shorter than the session (Curator's
    /// SessionConnectionStateErrorPolicy): it is stopped only when the session expires or the
    /// safe window ends (SIGTERM and SIGKILL then, no grace). Default: stopped at the
    /// disconnect (SIGTERM, SIGKILL by the kill deadline).
    #[arg(long)]
    pub ride_out: bool,
    /// The longest the lock may be held (from its acquisition): when it passes, the command's
    /// group is stopped as on a loss (SIGTERM, SIGKILL after --grace, never later than the safe
    /// window minus --kill-margin), then the lock is released; exit 124.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub max_hold: Option<Duration>,
    /// Serve the library's metrics for Prometheus at http://ADDR/metrics (ADDR as
    /// 127.0.0.1:9464) while zklock runs: for a long-running command or leader. See
    /// docs/metrics.md.
    #[arg(long, env = "ZKLOCK_METRICS_ADDR", value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Run this command string through `sh -c`, as flock -c.
    #[arg(short = 'c', long = "command", value_name = "STRING", conflicts_with = "command")]
    pub shell: Option<String>,
    /// The command and its arguments, after --.
    #[arg(last = true, num_args = 1.., required_unless_present = "shell")]
    pub command: Vec<String>,
}

#[derive(Args)]
pub struct HoldArgs {
    #[command(flatten)]
    pub lock: LockArgs,
    /// Print the token as JSON (path, node, fencing_token).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct StatusArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The lock or election path.
    pub lockpath: String,
}

#[derive(Args)]
pub struct LsArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The prefix to list under (default /).
    #[arg(default_value = "/")]
    pub prefix: String,
}

#[derive(Args)]
pub struct ElectArgs {
    /// Participant id (default hostname:pid).
    #[arg(long)]
    pub id: Option<String>,
    /// How long the command's group gets after SIGTERM before SIGKILL; on a loss, capped by
    /// the session (see run --grace).
    #[arg(long, env = "ZKLOCK_GRACE", default_value = "5s", value_parser = duration)]
    pub grace: Duration,
    /// Safety margin before the end of the safe window (see run --kill-margin).
    #[arg(long, env = "ZKLOCK_KILL_MARGIN", value_parser = duration)]
    pub kill_margin: Option<Duration>,
    /// Keep leading through a disconnect shorter than the session (see run --ride-out).
    #[arg(long, conflicts_with = "observe")]
    pub ride_out: bool,
    /// Serve the library's metrics for Prometheus at http://ADDR/metrics (ADDR as
    /// 127.0.0.1:9464) while zklock runs: for a long-running command or leader. See
    /// docs/metrics.md.
    #[arg(long, env = "ZKLOCK_METRICS_ADDR", value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Do not take part: print the leader and each change, as etcdctl elect -l.
    #[arg(long, short = 'l', conflicts_with_all = ["shell", "command", "id"])]
    pub observe: bool,
    /// With --observe: print one JSON object per line.
    #[arg(long, requires = "observe")]
    pub json: bool,
    /// Run this command string through `sh -c`.
    #[arg(short = 'c', long = "command", value_name = "STRING", conflicts_with = "command")]
    pub shell: Option<String>,
    /// The election path, e.g. /election/scheduler.
    pub electpath: String,
    /// The command and its arguments, after --.
    #[arg(last = true, num_args = 1.., required_unless_present_any = ["shell", "observe"])]
    pub command: Vec<String>,
}

#[derive(Args)]
pub struct RevokeArgs {
    /// Ask only this queue node (its name or full path), e.g. one of a semaphore's lease
    /// holders; default: every holder (a lock's, each lease holder of a semaphore, an
    /// election's leader).
    #[arg(long)]
    pub node: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// The lock, semaphore or election path.
    pub lockpath: String,
}

#[derive(Args)]
pub struct BreakArgs {
    /// The queue node to delete (its name or full path); default: the holder's.
    #[arg(long)]
    pub node: Option<String>,
    /// Do not ask for confirmation.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// The lock path.
    pub lockpath: String,
}

#[derive(Args)]
pub struct ManArgs {
    /// Write every page into this directory (zklock.1, zklock-run.1, ...) instead of
    /// printing zklock(1).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell.
    pub shell: clap_complete::Shell,
}

/// The longest session timeout ZooKeeper can carry: its field is a signed 32-bit count of
/// milliseconds (about 24.8 days).
pub const MAX_SESSION_TIMEOUT: Duration = Duration::from_millis(i32::MAX as u64);

/// Parses `--session-timeout`: a duration of at least 1ms and at most `MAX_SESSION_TIMEOUT`.
/// Zero would silently become the client's default (6s), and less than a millisecond is zero
/// in ZooKeeper's millisecond field.
pub fn session_timeout(text: &str) -> Result<Duration, String> {
    let timeout = duration(text)?;
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

/// Parses a duration: `30s`, `500ms`, `1h 30m` (humantime), or a bare number of seconds
/// (`5`, `0.5`), as flock takes.
pub fn duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let seconds: f64 = trimmed.parse().map_err(|_| format!("not a number of seconds: {text}"))?;
        return Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text}: {e}"));
    }
    humantime::parse_duration(text).map_err(|e| e.to_string())
}

/// Parses `--auth`: USER:PASSWORD, both non-empty.
fn digest(text: &str) -> Result<String, String> {
    match text.split_once(':') {
        Some((user, password)) if !user.is_empty() && !password.is_empty() => Ok(text.to_string()),
        _ => Err("expected USER:PASSWORD (digest authentication)".into()),
    }
}

/// How log events are written (`--log-format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Args)]
pub struct DeadlocksArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Read at most N nodes (paths listed and queue nodes read); the report says when it
    /// stopped there.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub max_nodes: usize,
    /// Where to look: every queue at or under it (`/`: the whole tree), e.g. /locks.
    pub root: String,
}

#[derive(Args)]
pub struct TopArgs {
    /// How often to read the tree again and redraw, e.g. 2s or 500ms.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = duration)]
    pub interval: Duration,
    /// Print one frame, without clearing the screen, and exit (for scripts).
    #[arg(long)]
    pub once: bool,
    /// Age holds by the server's clock: before each frame, set this persistent node's data
    /// (created if missing; its parent must exist) and age each hold by its mtime. The only
    /// write top makes. Default: by this host's clock, which the frame says.
    #[arg(long, value_name = "PATH")]
    pub clock_node: Option<String>,
    /// Read at most N nodes per frame.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub max_nodes: usize,
    /// Where to look: every queue at or under it (`/`: the whole tree), e.g. /locks.
    pub root: String,
}

#[derive(Args)]
pub struct OncePerArgs {
    /// Delete the marker (exit 1 if there is none): the next `run --once-per` runs at once.
    #[arg(long)]
    pub clear: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// The lock path `run --once-per` took, e.g. /locks/nightly-report.
    pub lockpath: String,
}
