//! Whether the process peers (Curator, kazoo) can run here, installing them through
//! `scripts/ensure-peers` where that can work, and compiling the Curator driver.
//!
//! Nothing here panics: a missing peer is a one-line reason the caller reports.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::peers::{self, Peer};

const CURATOR_JARS: [&str; 2] = ["/usr/share/java/curator-recipes.jar", "/usr/share/java/slf4j-nop.jar"];
const SYSTEM_PYTHON: &str = "/usr/bin/python3";

fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Why `peer` can't run here, or `None` when its prerequisites are installed.
pub fn missing(peer: Peer) -> Option<String> {
    match peer {
        Peer::Curator => {
            if let Some(jar) = CURATOR_JARS.iter().find(|j| !Path::new(j).exists()) {
                Some(format!("no {jar}"))
            } else if !runs("javac", &["-version"]) {
                Some("no javac (a JDK) on PATH".into())
            } else if !runs("java", &["-version"]) {
                Some("no java on PATH".into())
            } else {
                None
            }
        }
        Peer::Kazoo => {
            if !Path::new(SYSTEM_PYTHON).exists() {
                Some(format!("no {SYSTEM_PYTHON}"))
            } else if !runs(SYSTEM_PYTHON, &["-c", "import kazoo"]) {
                Some(format!("kazoo is not importable by {SYSTEM_PYTHON}"))
            } else {
                None
            }
        }
        Peer::ZkRecipes | Peer::ZkRecipesDrop | Peer::LockClient | Peer::Naive => None,
    }
}

/// `scripts/ensure-peers` in this checkout, when it exists.
pub fn ensure_peers_script() -> Option<PathBuf> {
    Some(peers::repo().join("scripts/ensure-peers")).filter(|p| p.is_file())
}

/// Whether `scripts/ensure-peers` can install packages without asking anyone: it uses apt-get,
/// as root or through passwordless sudo.
pub fn can_install() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    runs("apt-get", &["--version"]) && (root || runs("sudo", &["-n", "true"]))
}

/// Runs `scripts/ensure-peers`, its output going to our stderr. `Err` with a one-line reason.
pub fn run_ensure_peers(script: &Path) -> Result<(), String> {
    let status = Command::new(script)
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| format!("{}: {e}", script.display()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{} failed ({status})", script.display()))
    }
}

/// Compiles the Curator drivers: `tests/peers/CuratorPeer.java` into `target/<profile>/peers/curator`,
/// where the shared driver code (`tests/common/peers.rs`) looks for it, and the bench's own
/// `bench/peers/CuratorFleet.java` (the fleet scenario) into `target/<profile>/peers/curator-fleet`,
/// each unless its class is up to date. Done here first so that a failure is a reason, not a
/// panic in the shared code.
pub fn compile_curator() -> Result<(), String> {
    compile_java(&peers::repo().join("tests/peers/CuratorPeer.java"), "curator")?;
    compile_java(&peers::repo().join("bench/peers/CuratorFleet.java"), "curator-fleet")
}

/// Where `compile_curator` puts the class `source` in `dir`.
fn classes(dir: &str) -> PathBuf {
    peers::target_dir().join("peers").join(dir)
}

fn compile_java(source: &Path, dir: &str) -> Result<(), String> {
    let out = classes(dir);
    let class = source.with_extension("class");
    let class = out.join(class.file_name().unwrap_or_default());
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if matches!((modified(&class), modified(source)), (Some(c), Some(s)) if c >= s) {
        return Ok(());
    }
    let name = source.file_name().unwrap_or_default().to_string_lossy();
    if !source.is_file() {
        return Err(format!("no {} (run zk-bench from a zk-recipes checkout)", source.display()));
    }
    let tmp = peers::target_dir().join("peers").join(format!("{dir}-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let output = Command::new("javac")
        .args(["-nowarn", "-d"])
        .arg(&tmp)
        .args(["-cp", &CURATOR_JARS.join(":")])
        .arg(source)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("javac: {e}"))?;
    if !output.status.success() {
        let _ = std::fs::remove_dir_all(&tmp);
        let why = String::from_utf8_lossy(&output.stderr);
        let first = why.lines().find(|l| !l.trim().is_empty()).unwrap_or("no output");
        return Err(format!("compiling {name} failed: {first}"));
    }
    let _ = std::fs::remove_dir_all(&out);
    if std::fs::rename(&tmp, &out).is_err() {
        let _ = std::fs::remove_dir_all(&tmp); // another process compiled it meanwhile
    }
    Ok(())
}

/// The Curator fleet driver with `args` (compiled by [`compile_curator`]).
pub fn curator_fleet(args: &[&str]) -> Command {
    let mut cmd = Command::new("java");
    cmd.arg("-cp").arg(format!("{}:{}", CURATOR_JARS.join(":"), classes("curator-fleet").display()));
    cmd.arg("CuratorFleet").args(args);
    cmd
}

/// The kazoo fleet driver with `args`.
pub fn kazoo_fleet(args: &[&str]) -> Command {
    let mut cmd = Command::new(SYSTEM_PYTHON);
    cmd.arg(peers::repo().join("bench/peers/kazoo_fleet.py")).args(args);
    cmd
}
