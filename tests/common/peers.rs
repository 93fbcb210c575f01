//! The Curator and kazoo peer processes (sources in `tests/peers/`) and our own worker.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

const CURATOR_JARS: &str = "/usr/share/java/curator-recipes.jar:/usr/share/java/slf4j-nop.jar";
const SYSTEM_PYTHON: &str = "/usr/bin/python3";

/// The repository root: the first ancestor of this crate's manifest directory with `tests/peers`
/// (this file is shared by the tests and the `zk-bench` crate).
pub fn repo() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.ancestors().find(|d| d.join("tests/peers").is_dir()).unwrap_or(&here).to_path_buf()
}

/// The profile's target directory (`target/debug` or `target/release`), from the running binary
/// (a test in `deps/`, or a binary beside `deps/`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("binary path");
    let dir = exe.parent().expect("binary dir");
    if dir.ends_with("deps") { dir.parent().expect("target dir") } else { dir }.to_path_buf()
}

/// Compiles `CuratorPeer.java` once (per source change) into `target/<profile>/peers/curator`.
fn curator_classes() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let source = repo().join("tests/peers/CuratorPeer.java");
        let out = target_dir().join("peers").join("curator");
        let class = out.join("CuratorPeer.class");
        let fresh = |c: &PathBuf| {
            let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
            matches!((modified(c), modified(&source)), (Some(c), Some(s)) if c >= s)
        };
        if !fresh(&class) {
            // Compile into a private directory, then rename: test binaries may race here.
            let tmp = target_dir().join("peers").join(format!("curator-{}", std::process::id()));
            std::fs::create_dir_all(&tmp).expect("mkdir");
            let status = Command::new("javac")
                .args(["-nowarn", "-d"])
                .arg(&tmp)
                .args(["-cp", CURATOR_JARS])
                .arg(&source)
                .status()
                .expect("javac (scripts/ensure-peers installs it)");
            assert!(status.success(), "compiling CuratorPeer.java failed");
            let _ = std::fs::remove_dir_all(&out);
            if std::fs::rename(&tmp, &out).is_err() {
                let _ = std::fs::remove_dir_all(&tmp); // another binary won the race
            }
        }
        out
    })
    .clone()
}

/// `java CuratorPeer <args>`.
pub fn curator(args: &[&str]) -> Command {
    let mut cmd = Command::new("java");
    cmd.arg("-cp")
        .arg(format!("{CURATOR_JARS}:{}", curator_classes().display()))
        .arg("CuratorPeer")
        .args(args);
    cmd
}

/// `/usr/bin/python3 kazoo_peer.py <args>` (Debian's python, which has kazoo).
pub fn kazoo(args: &[&str]) -> Command {
    let mut cmd = Command::new(SYSTEM_PYTHON);
    cmd.arg(repo().join("tests/peers/kazoo_peer.py")).args(args);
    cmd
}

/// Our `counter_worker` example (built on demand for filtered runs).
pub fn rust_worker(args: &[&str]) -> Command {
    let worker = target_dir().join("examples").join("counter_worker");
    if !worker.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        assert!(Command::new(cargo)
            .args(["build", "--example", "counter_worker"])
            .status()
            .expect("cargo")
            .success());
    }
    let mut cmd = Command::new(worker);
    cmd.args(args);
    cmd
}
