//! [`RedisServer`]: one throwaway Redis server on a free loopback port.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::ports::free_ports;
use crate::resource::{self, ServerProcess, START_ATTEMPTS};
use crate::HarnessError;

const RESOURCE: &str = "Redis";

/// What to tell a person when Redis is missing.
const INSTALL_HINT: &str = "run scripts/ensure-resources (Debian/Ubuntu: sudo apt-get install -y \
    redis-server), or set REDIS_SERVER to the redis-server binary";

/// Settings for a [`RedisServer`].
#[derive(Clone, Debug)]
pub struct RedisConfig {
    /// The `redis-server` binary. `None`: `$REDIS_SERVER` when set, else `redis-server` on
    /// `PATH`, in `/usr/bin` or `/usr/sbin`.
    pub binary: Option<PathBuf>,
    /// How long to wait for the server to answer `PING`.
    pub ready_timeout: Duration,
    /// Extra `--key value` options for `redis-server`.
    pub options: Vec<(String, String)>,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig { binary: None, ready_timeout: Duration::from_secs(30), options: Vec::new() }
    }
}

/// A running throwaway Redis server on `127.0.0.1` at a free port, without persistence
/// (`--save ''`, `--appendonly no`), its working directory a fresh temporary one.
///
/// [`RedisServer::stop`] and drop (also while a test panics) send SIGTERM by PID, SIGKILL after
/// 10 s, and remove the directory.
#[derive(Debug)]
pub struct RedisServer {
    process: ServerProcess,
    port: u16,
    dir: Option<tempfile::TempDir>,
}

impl RedisServer {
    /// Starts a server with [`RedisConfig::default`] and returns once it answers `PING`.
    ///
    /// # Errors
    /// [`HarnessError::NotInstalled`] (saying what to install) when `redis-server` is missing;
    /// [`HarnessError::ResourceNotReady`] (with the server log's tail) when it does not come up.
    pub async fn start() -> Result<RedisServer, HarnessError> {
        Self::start_with(RedisConfig::default()).await
    }

    /// Starts a server with explicit settings.
    ///
    /// # Errors
    /// As [`RedisServer::start`].
    pub async fn start_with(config: RedisConfig) -> Result<RedisServer, HarnessError> {
        let binary = find_binary(config.binary.clone())?;
        let dir = resource::temp_dir("redis")?;
        let log = dir.path().join("redis.log");
        let mut last_err = None;
        for attempt in 1..=START_ATTEMPTS {
            let port = free_ports(1)?[0];
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            let mut cmd = Command::new(&binary);
            cmd.current_dir(dir.path())
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .args(["--daemonize", "no", "--logfile", ""])
                .arg("--dir")
                .arg(dir.path());
            for (k, v) in &config.options {
                cmd.arg(format!("--{k}")).arg(v);
            }
            let mut process = ServerProcess::spawn(RESOURCE, cmd, &log, libc::SIGTERM)?;
            let pid = process.pid();
            match resource::wait_ready(RESOURCE, addr, &mut process, &log, config.ready_timeout, || {
                ping(addr)
            })
            .await
            {
                Ok(()) => {
                    tracing::debug!(pid, port, "started Redis");
                    return Ok(RedisServer { process, port, dir: Some(dir) });
                }
                Err(e) => {
                    tracing::warn!(attempt, error = %e, "Redis start failed; retrying with a fresh port");
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

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The server's PID.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The temporary directory (the server's working directory and `redis.log`). `None` once
    /// stopped.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_ref().map(|d| d.path())
    }

    /// SIGTERM by PID, waiting up to 10 s before SIGKILL, then removes the temporary directory.
    /// Idempotent; drop does the same.
    pub fn stop(&mut self) {
        self.process.stop();
        resource::release_dir(self.dir.take(), RESOURCE);
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether `PING` on a fresh connection answers `+PONG` (within a second).
async fn ping(addr: SocketAddr) -> bool {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream.write_all(b"PING\r\n").await?;
        let mut answer = [0u8; 7];
        stream.read_exact(&mut answer).await?;
        Ok::<_, std::io::Error>(answer.starts_with(b"+PONG"))
    };
    matches!(tokio::time::timeout(Duration::from_secs(1), exchange).await, Ok(Ok(true)))
}

/// Finds `redis-server`.
fn find_binary(explicit: Option<PathBuf>) -> Result<PathBuf, HarnessError> {
    let explicit =
        explicit.or_else(|| std::env::var_os("REDIS_SERVER").filter(|v| !v.is_empty()).map(PathBuf::from));
    if let Some(path) = explicit {
        return if path.is_file() {
            Ok(path)
        } else {
            Err(HarnessError::NotInstalled {
                resource: RESOURCE,
                hint: format!("{} is not a file; {INSTALL_HINT}", path.display()),
            })
        };
    }
    let path_dirs =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect::<Vec<_>>()).unwrap_or_default();
    let candidates = path_dirs
        .into_iter()
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
        .map(|d| d.join("redis-server"));
    resource::first_existing(candidates).ok_or_else(|| HarnessError::NotInstalled {
        resource: RESOURCE,
        hint: format!("no redis-server on PATH or in /usr/bin; {INSTALL_HINT}"),
    })
}
