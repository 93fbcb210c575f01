//! [`PostgresServer`]: one throwaway PostgreSQL cluster on a free loopback port.

use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::ports::free_ports;
use crate::resource::{self, ServerProcess, START_ATTEMPTS};
use crate::HarnessError;

const RESOURCE: &str = "PostgreSQL";

/// What to tell a person when PostgreSQL is missing.
const INSTALL_HINT: &str = "run scripts/ensure-resources (Debian/Ubuntu: sudo apt-get install -y \
    postgresql), or set PG_BIN to a directory holding PostgreSQL's `initdb` and `postgres`";

/// Settings for a [`PostgresServer`]. [`PostgresConfig::default`] is tuned for fast tests.
#[derive(Clone, Debug)]
pub struct PostgresConfig {
    /// The directory with `initdb` and `postgres`. `None`: `$PG_BIN` when set, else the highest
    /// `/usr/lib/postgresql/*/bin`, else `pg_config --bindir`.
    pub bin_dir: Option<PathBuf>,
    /// How long to wait for the server to accept connections.
    pub ready_timeout: Duration,
    /// Extra server settings, passed as `-c key=value`.
    pub settings: Vec<(String, String)>,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        PostgresConfig { bin_dir: None, ready_timeout: Duration::from_secs(30), settings: Vec::new() }
    }
}

/// A running throwaway PostgreSQL cluster: trust authentication, superuser `postgres`, database
/// `postgres`, listening on `127.0.0.1` at a free port and on a Unix socket in its temporary
/// directory.
///
/// Started with `initdb` in a fresh temporary directory; durability is off (`fsync`,
/// `synchronous_commit`, `full_page_writes`) since it is not under test. As root, `initdb` and
/// the postmaster run as the `postgres` user (PostgreSQL refuses to run as root), and the PID
/// held is the postmaster's own. [`PostgresServer::stop`] and drop (also while a test panics)
/// ask for a fast shutdown (SIGINT) by PID, SIGKILL after 10 s, and remove the directory (see
/// `ZK_TEST_KEEP_LOGS` on [`crate::ZkCluster`] to keep it).
#[derive(Debug)]
pub struct PostgresServer {
    process: ServerProcess,
    port: u16,
    dir: Option<tempfile::TempDir>,
}

impl PostgresServer {
    /// Starts a server with [`PostgresConfig::default`] and returns once it accepts
    /// connections.
    ///
    /// # Errors
    /// [`HarnessError::NotInstalled`] (saying what to install) when PostgreSQL is missing;
    /// [`HarnessError::ResourceSetup`] when `initdb` fails; [`HarnessError::ResourceNotReady`]
    /// (with the server log's tail) when the server does not come up.
    pub async fn start() -> Result<PostgresServer, HarnessError> {
        Self::start_with(PostgresConfig::default()).await
    }

    /// Starts a server with explicit settings.
    ///
    /// # Errors
    /// As [`PostgresServer::start`].
    pub async fn start_with(config: PostgresConfig) -> Result<PostgresServer, HarnessError> {
        let bin = bin_dir(config.bin_dir.clone())?;
        let owner = if is_root() { Some(postgres_user()?) } else { None };
        let dir = resource::temp_dir("postgres")?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .map_err(HarnessError::io(format!("chown of {} to postgres", dir.path().display())))?;
        }
        let initdb = initdb_command(&bin, dir.path(), owner);
        tokio::task::spawn_blocking(move || run_initdb(initdb)).await.map_err(|e| HarnessError::Io {
            context: "running initdb".into(),
            source: std::io::Error::other(e),
        })??;

        let log = dir.path().join("postgres.log");
        let mut last_err = None;
        for attempt in 1..=START_ATTEMPTS {
            let port = free_ports(1)?[0];
            let cmd = postmaster_command(&bin, dir.path(), port, owner, &config.settings);
            let mut process = ServerProcess::spawn(RESOURCE, cmd, &log, libc::SIGINT)?;
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            let pid_file = dir.path().join("data").join("postmaster.pid");
            let pid = process.pid();
            let ready =
                resource::wait_ready(RESOURCE, addr, &mut process, &log, config.ready_timeout, || {
                    accepting(&pid_file, pid, addr)
                })
                .await;
            match ready {
                Ok(()) => {
                    tracing::debug!(pid, port, "started PostgreSQL");
                    return Ok(PostgresServer { process, port, dir: Some(dir) });
                }
                Err(e) => {
                    tracing::warn!(
                        attempt,
                        error = %e,
                        "PostgreSQL start failed; retrying with a fresh port"
                    );
                    process.stop();
                    last_err = Some(e);
                }
            }
        }
        let err = last_err.expect("at least one attempt");
        resource::release_dir(Some(dir), RESOURCE);
        Err(err)
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        (Ipv4Addr::LOCALHOST, self.port).into()
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A libpq / `tokio_postgres` connection string:
    /// `host=127.0.0.1 port=PORT user=postgres dbname=postgres`.
    pub fn connect_params(&self) -> String {
        format!("host=127.0.0.1 port={} user=postgres dbname=postgres", self.port)
    }

    /// The postmaster's PID.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The temporary directory: `data/` (the cluster), `postgres.log` and the Unix socket
    /// (`.s.PGSQL.PORT`). `None` once stopped.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_ref().map(|d| d.path())
    }

    /// The server's log file (its stdout and stderr). `None` once stopped.
    pub fn log_path(&self) -> Option<PathBuf> {
        self.dir().map(|d| d.join("postgres.log"))
    }

    /// Fast shutdown (SIGINT) by PID, waiting up to 10 s before SIGKILL, then removes the
    /// temporary directory. Idempotent; drop does the same.
    pub fn stop(&mut self) {
        self.process.stop();
        resource::release_dir(self.dir.take(), RESOURCE);
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether the server is up: its `postmaster.pid` names our process with status `ready`, and its
/// TCP port accepts a connection.
async fn accepting(pid_file: &Path, pid: u32, addr: SocketAddr) -> bool {
    let Ok(text) = std::fs::read_to_string(pid_file) else { return false };
    let lines = text.lines().collect::<Vec<_>>();
    let ours = lines.first().and_then(|l| l.trim().parse::<u32>().ok()) == Some(pid);
    let ready = lines.get(7).is_some_and(|l| l.trim() == "ready");
    ours && ready && tokio::net::TcpStream::connect(addr).await.is_ok()
}

/// Finds the directory with `initdb` and `postgres`.
fn bin_dir(explicit: Option<PathBuf>) -> Result<PathBuf, HarnessError> {
    let usable = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    let explicit =
        explicit.or_else(|| std::env::var_os("PG_BIN").filter(|v| !v.is_empty()).map(PathBuf::from));
    if let Some(dir) = explicit {
        return if usable(&dir) {
            Ok(dir)
        } else {
            Err(HarnessError::NotInstalled {
                resource: RESOURCE,
                hint: format!("{} has no initdb and postgres; {INSTALL_HINT}", dir.display()),
            })
        };
    }
    if let Some(dir) = highest_debian_bin().filter(|d| usable(d)) {
        return Ok(dir);
    }
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    match from_pg_config {
        Some(dir) if usable(&dir) => Ok(dir),
        _ => Err(HarnessError::NotInstalled {
            resource: RESOURCE,
            hint: format!(
                "no initdb and postgres in /usr/lib/postgresql/*/bin or `pg_config --bindir`; {INSTALL_HINT}"
            ),
        }),
    }
}

/// The newest `/usr/lib/postgresql/<version>/bin`, by numeric version.
fn highest_debian_bin() -> Option<PathBuf> {
    let version = |name: &str| name.split('.').map(|p| p.parse::<u32>().ok()).collect::<Option<Vec<u32>>>();
    std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| Some((version(e.file_name().to_str()?)?, e.path().join("bin"))))
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, bin)| bin)
}

/// The `postgres` user's uid and gid (we run as root, and PostgreSQL refuses to).
fn postgres_user() -> Result<(u32, u32), HarnessError> {
    let mut pwd = std::mem::MaybeUninit::<libc::passwd>::uninit();
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; `buf` outlives the use of `pwd`'s fields,
    // and we read only the integer fields after a successful lookup.
    let rc = unsafe {
        libc::getpwnam_r(c"postgres".as_ptr(), pwd.as_mut_ptr(), buf.as_mut_ptr(), buf.len(), &mut found)
    };
    if rc != 0 || found.is_null() {
        return Err(HarnessError::NotInstalled {
            resource: RESOURCE,
            hint: format!(
                "running as root needs a `postgres` user to run the server as (the postgresql \
                 package creates it); {INSTALL_HINT}"
            ),
        });
    }
    // SAFETY: getpwnam_r succeeded and filled `pwd`.
    let pwd = unsafe { pwd.assume_init() };
    Ok((pwd.pw_uid, pwd.pw_gid))
}

/// A command run in `dir`, as `owner` when given.
fn command(program: PathBuf, dir: &Path, owner: Option<(u32, u32)>) -> Command {
    let mut cmd = Command::new(program);
    cmd.current_dir(dir).env_remove("PGDATA").env_remove("PGPORT").env_remove("PGHOST");
    if let Some((uid, gid)) = owner {
        // std drops supplementary groups (setgroups) when it changes the uid as root.
        cmd.uid(uid).gid(gid).env("HOME", dir).env("USER", "postgres").env("LOGNAME", "postgres");
    }
    cmd
}

fn initdb_command(bin: &Path, dir: &Path, owner: Option<(u32, u32)>) -> Command {
    let mut cmd = command(bin.join("initdb"), dir, owner);
    cmd.arg("-D").arg(dir.join("data")).args([
        "--auth=trust",
        "-U",
        "postgres",
        "--no-sync",
        "-E",
        "UTF8",
        "--locale=C",
    ]);
    cmd
}

fn run_initdb(mut cmd: Command) -> Result<(), HarnessError> {
    let out = cmd.output().map_err(HarnessError::io("running initdb"))?;
    if out.status.success() {
        return Ok(());
    }
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    let tail = text.lines().rev().take(20).collect::<Vec<_>>();
    Err(HarnessError::ResourceSetup {
        resource: RESOURCE,
        step: format!("{:?} ({})", cmd, out.status),
        output: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
    })
}

fn postmaster_command(
    bin: &Path,
    dir: &Path,
    port: u16,
    owner: Option<(u32, u32)>,
    settings: &[(String, String)],
) -> Command {
    let mut cmd = command(bin.join("postgres"), dir, owner);
    cmd.arg("-D").arg(dir.join("data")).arg("-p").arg(port.to_string()).arg("-k").arg(dir);
    let fixed = [
        ("listen_addresses", "127.0.0.1"),
        ("fsync", "off"),
        ("synchronous_commit", "off"),
        ("full_page_writes", "off"),
        ("shared_buffers", "32MB"),
    ];
    for (k, v) in
        fixed.iter().map(|(k, v)| (*k, *v)).chain(settings.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    {
        cmd.arg("-c").arg(format!("{k}={v}"));
    }
    cmd
}
