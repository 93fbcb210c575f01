//! The local backend: ZooKeeper's server jar run as a plain `java` process.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use crate::{spawner, HarnessError};

/// Where Debian's `zookeeper` package puts the server jar.
const DEBIAN_JAR: &str = "/usr/share/java/zookeeper.jar";
/// Debian's slf4j binding that sends the server's log to stderr (our per-node log file).
const DEBIAN_SLF4J: &str = "/usr/share/java/slf4j-simple.jar";
const DEBIAN_NETTY_CODEC: &str = "/usr/share/java/netty-codec.jar";

/// What to tell a person when no local ZooKeeper is found.
pub(crate) const INSTALL_HINT: &str = "install one of:\n  \
    * Debian/Ubuntu: sudo apt-get install -y zookeeper   (then /usr/share/java/zookeeper.jar exists)\n  \
    * any OS: unpack an Apache ZooKeeper 3.8+ release and set ZOOKEEPER_HOME to its directory\n  \
    * with Docker running: build with --features zk-testcluster/docker and set ZK_TEST_BACKEND=docker\n\
    Java 11+ must be on PATH for the local backend.";

/// The Java class path of a local ZooKeeper installation.
#[derive(Clone, Debug)]
pub(crate) struct LocalInstall {
    classpath: String,
}

impl LocalInstall {
    /// Finds ZooKeeper: `$ZOOKEEPER_HOME` first (an Apache release: `lib/*.jar`), then Debian's
    /// package.
    pub(crate) fn find() -> Result<LocalInstall, HarnessError> {
        if let Some(home) = std::env::var_os("ZOOKEEPER_HOME") {
            let home = PathBuf::from(home);
            let lib = home.join("lib");
            if has_jar(&lib) {
                return Ok(LocalInstall { classpath: format!("{}/*", lib.display()) });
            }
            return Err(HarnessError::NoBackend(format!(
                "ZOOKEEPER_HOME={} has no lib/*.jar; {INSTALL_HINT}",
                home.display()
            )));
        }
        if Path::new(DEBIAN_JAR).exists() {
            let mut classpath = DEBIAN_JAR.to_string();
            // Debian's zookeeper.jar manifest omits netty-codec, which Netty's TLS handler
            // needs: without it the secure port closes every connection.
            for extra in [DEBIAN_SLF4J, DEBIAN_NETTY_CODEC] {
                if Path::new(extra).exists() {
                    classpath.push(':');
                    classpath.push_str(extra);
                }
            }
            return Ok(LocalInstall { classpath });
        }
        Err(HarnessError::NoBackend(format!(
            "no ZooKeeper jar at {DEBIAN_JAR} and ZOOKEEPER_HOME is unset; {INSTALL_HINT}"
        )))
    }

    /// Starts one server with the given configuration file, system properties and extra
    /// environment, logging to `log`, pinned to `cpus` when given (see [`pin`]).
    pub(crate) fn spawn(
        &self,
        cfg: &Path,
        log: &Path,
        heap_mb: u32,
        properties: &[(String, String)],
        env: &[(String, String)],
        cpus: Option<&[usize]>,
    ) -> Result<Child, HarnessError> {
        let level = std::env::var("ZK_TEST_LOG_LEVEL").unwrap_or_else(|_| "info".into());
        let mut cmd = Command::new("java");
        cmd.arg(format!("-Xmx{heap_mb}m"))
            .arg("-XX:+UseSerialGC")
            .arg(format!("-Dorg.slf4j.simpleLogger.defaultLogLevel={level}"))
            .arg("-Dorg.slf4j.simpleLogger.showDateTime=true")
            .arg("-Dzookeeper.admin.enableServer=false")
            .args(properties.iter().map(|(k, v)| format!("-D{k}={v}")))
            .arg("-cp")
            .arg(&self.classpath)
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(cfg)
            .envs(env.iter().map(|(k, v)| (k, v)));
        if let Some(cpus) = cpus {
            pin(&mut cmd, cpus)?;
        }
        spawner::log_to(&mut cmd, log)?;
        spawner::spawn(cmd).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                HarnessError::NoBackend(format!("`java` is not on PATH; {INSTALL_HINT}"))
            } else {
                HarnessError::Io { context: "spawning java".into(), source: e }
            }
        })
    }
}

/// Has `cmd`'s process pin itself to `cpus` before it runs anything: `sched_setaffinity` between
/// fork and exec, so every thread it starts inherits the set ([`crate::ClusterConfig::cpus`]).
fn pin(cmd: &mut Command, cpus: &[usize]) -> Result<(), HarnessError> {
    let invalid = |why: String| HarnessError::Io {
        context: "pinning the servers to CPUs (ClusterConfig::cpus)".into(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, why),
    };
    if cpus.is_empty() {
        return Err(invalid("no CPU given".into()));
    }
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(invalid(format!("CPU {cpu} is beyond the {} a set can hold", libc::CPU_SETSIZE)));
        }
        // SAFETY: `cpu` is below CPU_SETSIZE, checked above, so the bit is inside the set.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: sched_setaffinity is a plain system call, async-signal-safe; the closure owns its
    // copy of the set and allocates nothing between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(())
}

fn has_jar(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .map(|entries| entries.flatten().any(|e| e.path().extension().is_some_and(|x| x == "jar")))
        .unwrap_or(false)
}

/// Sends `signal` to `pid`.
pub(crate) fn signal(pid: u32, signal: libc::c_int) -> Result<(), HarnessError> {
    // SAFETY: kill(2) has no memory-safety preconditions.
    let rc = unsafe { libc::kill(pid as libc::pid_t, signal) };
    if rc == 0 {
        Ok(())
    } else {
        Err(HarnessError::Io {
            context: format!("kill({pid}, {signal})"),
            source: std::io::Error::last_os_error(),
        })
    }
}

/// Waits until every thread of `pid` is stopped (state `T` in `/proc/<pid>/task/*/stat`).
pub(crate) fn wait_stopped(pid: u32, patience: std::time::Duration) -> Result<(), HarnessError> {
    let deadline = std::time::Instant::now() + patience;
    let state = |stat: &str| stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map_err(HarnessError::io(format!("reading /proc/{pid}/task")))?;
        let all_stopped = tasks.flatten().all(|t| {
            std::fs::read_to_string(t.path().join("stat"))
                .map(|s| matches!(state(&s), Some('T' | 't')))
                .unwrap_or(true)
        });
        if all_stopped {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(HarnessError::Io {
                context: format!("SIGSTOP of {pid}"),
                source: std::io::Error::other("threads still running"),
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}
