//! The local backend: ZooKeeper's server jar run as a plain `java` process.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use crate::{spawner, HarnessError, ZkVersion};

/// The server's main class.
const MAIN: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";
/// Where `flink-shaded-zookeeper-3` relocates ZooKeeper's classes.
const FLINK_PREFIX: &str = "org.apache.flink.shaded.zookeeper3";
/// Where Debian's `zookeeper` package puts the server jar.
const DEBIAN_JAR: &str = "/usr/share/java/zookeeper.jar";
/// Debian's slf4j binding that sends the server's log to stderr (our per-node log file).
const DEBIAN_SLF4J: &str = "/usr/share/java/slf4j-simple.jar";
const DEBIAN_NETTY_CODEC: &str = "/usr/share/java/netty-codec.jar";

/// What to tell a person when no local ZooKeeper is found.
pub(crate) const INSTALL_HINT: &str = "install one of:\n  \
    * Debian/Ubuntu: scripts/ensure-zookeeper-versions (fetches the default 3.9.3 into target/; \
    3.8.0 is Debian 12's zookeeper package)\n  \
    * any OS: unpack an Apache ZooKeeper 3.6+ release and set ZOOKEEPER_HOME to its directory\n  \
    * with Docker running: build with --features zk-testcluster/docker and set ZK_TEST_BACKEND=docker\n\
    Java 11+ must be on PATH for the local backend.";

/// The Java class path of one ZooKeeper version's local installation.
#[derive(Clone, Debug)]
pub(crate) struct LocalInstall {
    classpath: String,
    /// `QuorumPeerMain`'s class name: relocated in a shaded jar (Flink's, for 3.5.9).
    main: String,
    /// The version its servers must report, or `None` for a `ZOOKEEPER_HOME` that `ZK_VERSION`
    /// does not name (the harness then only reports what the servers say).
    pub(crate) expect: Option<ZkVersion>,
}

impl LocalInstall {
    /// Finds ZooKeeper `version`: `$ZOOKEEPER_HOME` (an Apache release: `lib/*.jar`) when
    /// `version` is the run's version ([`ZkVersion::from_env`]); else the folder
    /// `scripts/ensure-zookeeper-versions` unpacks it into ([`ZkVersion::install_dir`]); for
    /// 3.8.0, else Debian 12's package.
    pub(crate) fn find(version: ZkVersion) -> Result<LocalInstall, HarnessError> {
        let run_version = ZkVersion::from_env()?;
        if let Some(home) = std::env::var_os("ZOOKEEPER_HOME").filter(|h| !h.is_empty()) {
            if version == run_version {
                return Self::home(PathBuf::from(home));
            }
        }
        let lib = version.install_dir().join("lib");
        let own = lib.join(format!("zookeeper-{version}.jar"));
        if own.exists() {
            // The version's own jute first: its server jar's manifest (Debian's) names Debian 12's
            // 3.8 `zookeeper-jute.jar`, whose classes must not win.
            let jute = lib.join(format!("zookeeper-jute-{version}.jar"));
            let classpath = format!("{}:{}:{}/*", jute.display(), own.display(), lib.display());
            return Ok(LocalInstall { classpath, main: MAIN.into(), expect: Some(version) });
        }
        // Flink's relocated copy of the whole server (PyPI's apache-flink-libraries), whose
        // classes live under its own package prefix.
        let shaded = lib.join(format!("flink-shaded-zookeeper-{version}.jar"));
        if shaded.exists() {
            let classpath = format!("{}:{}/*", shaded.display(), lib.display());
            let main = format!("{FLINK_PREFIX}.{MAIN}");
            return Ok(LocalInstall { classpath, main, expect: Some(version) });
        }
        if version == ZkVersion::V3_8_0 && Path::new(DEBIAN_JAR).exists() {
            return Ok(Self::debian());
        }
        let mut looked = lib.display().to_string();
        if version == ZkVersion::V3_8_0 {
            looked.push_str(&format!(" and {DEBIAN_JAR}"));
        }
        if !has_java() {
            return Err(HarnessError::NoBackend(format!("`java` is not on PATH; {INSTALL_HINT}")));
        }
        Err(HarnessError::MissingVersion { version, looked })
    }

    fn home(home: PathBuf) -> Result<LocalInstall, HarnessError> {
        let lib = home.join("lib");
        if !has_jar(&lib) {
            return Err(HarnessError::NoBackend(format!(
                "ZOOKEEPER_HOME={} has no lib/*.jar; {INSTALL_HINT}",
                home.display()
            )));
        }
        let expect = match std::env::var("ZK_VERSION") {
            Ok(v) if !v.trim().is_empty() => Some(v.parse()?),
            _ => None,
        };
        Ok(LocalInstall { classpath: format!("{}/*", lib.display()), main: MAIN.into(), expect })
    }

    fn debian() -> LocalInstall {
        let mut classpath = DEBIAN_JAR.to_string();
        // Debian's zookeeper.jar manifest omits netty-codec, which Netty's TLS handler
        // needs: without it the secure port closes every connection.
        for extra in [DEBIAN_SLF4J, DEBIAN_NETTY_CODEC] {
            if Path::new(extra).exists() {
                classpath.push(':');
                classpath.push_str(extra);
            }
        }
        LocalInstall { classpath, main: MAIN.into(), expect: Some(ZkVersion::V3_8_0) }
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
            .arg(&self.main)
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

/// Whether a `java` is on `PATH`.
fn has_java() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join("java").is_file()))
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
