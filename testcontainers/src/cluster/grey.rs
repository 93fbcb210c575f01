//! Grey failures of one server: a stalled disk, a full transaction-log disk, one-way and slow
//! links between servers.
//!
//! * [`ClusterConfig::disk_stall`]: the harness compiles a small `LD_PRELOAD` shim
//!   (`disk_stall.c`, with `cc`) into the cluster's directory and loads it into every server's
//!   JVM. Each `fsync`/`fdatasync` of a server first reads that server's control file
//!   (`<node>/stall_ms`); [`ZkCluster::stall_disk`] writes a delay there,
//!   [`ZkCluster::unstall_disk`] writes 0. The setting also turns `forceSync` on, so that every
//!   transaction waits for its log's `fdatasync`.
//! * [`ClusterConfig::log_disk_mb`]: each server's `dataLogDir` is a tmpfs of that size of its
//!   own, mounted at start (this needs `CAP_SYS_ADMIN`: root on a machine or a privileged
//!   container) and unmounted when the cluster is dropped. [`ZkCluster::fill_log_disk`] fills
//!   one with a filler file; [`ZkCluster::free_log_disk`] deletes it.
//! * [`ZkCluster::partition_one_way`] and [`ZkCluster::delay_link`] act on one direction between
//!   two servers of a [`ClusterConfig::partitionable`](crate::ClusterConfig::partitionable) ensemble.

use std::ffi::CString;
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{ClusterConfig, Node, ZkCluster};
use crate::HarnessError;

/// The shim's C source, compiled at cluster start.
const SHIM_SOURCE: &str = include_str!("disk_stall.c");

impl ClusterConfig {
    /// Sets [`ClusterConfig::disk_stall`] (and `forceSync` with it when on).
    #[must_use]
    pub fn disk_stall(mut self, on: bool) -> Self {
        self.disk_stall = on;
        self.force_sync |= on;
        self
    }

    /// Sets [`ClusterConfig::log_disk_mb`].
    #[must_use]
    pub fn log_disk_mb(mut self, size: Option<u32>) -> Self {
        self.log_disk_mb = size;
        self
    }
}

/// What a cluster keeps for its grey faults: the compiled shim and the mounted log disks.
#[derive(Debug, Default)]
pub(super) struct Grey {
    shim: Option<PathBuf>,
    mounts: Vec<PathBuf>,
}

impl Grey {
    /// Compiles the shim and mounts the log disks that `config` asks for, under `root`.
    pub(super) fn prepare(config: &ClusterConfig, nodes: &[Node], root: &Path) -> Result<Grey, HarnessError> {
        let mut grey = Grey::default();
        if config.disk_stall {
            grey.shim = Some(compile_shim(root)?);
        }
        if let Some(mb) = config.log_disk_mb {
            for node in nodes {
                let dir = log_dir(node);
                std::fs::create_dir_all(&dir)
                    .map_err(HarnessError::io(format!("creating {}", dir.display())))?;
                mount_tmpfs(&dir, mb)?;
                grey.mounts.push(dir);
            }
        }
        Ok(grey)
    }

    /// The extra environment of server `node`'s JVM: the node's own (see
    /// [`ZkCluster::restart_with_env`]) and the shim's, one `LD_PRELOAD` listing both libraries
    /// when both preload one.
    pub(super) fn env(&self, node: &Node) -> Vec<(String, String)> {
        let mut env = node.env.clone();
        let Some(shim) = &self.shim else { return env };
        let shim = shim.display().to_string();
        match env.iter_mut().find(|(k, _)| k == "LD_PRELOAD") {
            Some((_, libs)) => *libs = format!("{shim}:{libs}"),
            None => env.push(("LD_PRELOAD".into(), shim)),
        }
        env.push(("ZK_GREY_STALL_FILE".into(), stall_file(node).display().to_string()));
        env
    }

    /// Unmounts every log disk (the servers must be gone). Idempotent.
    pub(super) fn unmount(&mut self) {
        for dir in self.mounts.drain(..) {
            let Ok(target) = CString::new(dir.as_os_str().as_bytes()) else { continue };
            // SAFETY: umount2(2) with a NUL-terminated path.
            let rc = unsafe { libc::umount2(target.as_ptr(), 0) };
            if rc != 0 {
                // Busy (a process still has a file open there): detach it instead.
                // SAFETY: as above.
                unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
            }
        }
    }
}

impl Drop for Grey {
    fn drop(&mut self) {
        self.unmount();
    }
}

/// Server `node`'s transaction-log directory when it has a log disk of its own.
pub(super) fn log_dir(node: &Node) -> PathBuf {
    node.dir.join("datalog")
}

fn stall_file(node: &Node) -> PathBuf {
    node.dir.join("stall_ms")
}

fn filler(node: &Node) -> PathBuf {
    log_dir(node).join("filler")
}

fn compile_shim(root: &Path) -> Result<PathBuf, HarnessError> {
    let source = root.join("disk_stall.c");
    let shim = root.join("libzkdiskstall.so");
    std::fs::write(&source, SHIM_SOURCE).map_err(HarnessError::io("writing the disk-stall shim"))?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = std::process::Command::new(&cc)
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&shim)
        .arg(&source)
        .arg("-ldl")
        .output()
        .map_err(|e| HarnessError::NotInstalled {
            resource: "a C compiler",
            hint: format!("`{cc}` did not run ({e}); install gcc (Debian: apt-get install -y gcc) or set CC"),
        })?;
    if !out.status.success() {
        return Err(HarnessError::ResourceSetup {
            resource: "the disk-stall shim",
            step: format!("{cc} -shared -fPIC disk_stall.c"),
            output: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(shim)
}

fn mount_tmpfs(dir: &Path, mb: u32) -> Result<(), HarnessError> {
    let cstr = |s: &[u8]| {
        CString::new(s).map_err(|_| HarnessError::Io {
            context: format!("mounting {}", dir.display()),
            source: std::io::Error::other("a NUL in the path"),
        })
    };
    let (source, target, fstype) = (cstr(b"tmpfs")?, cstr(dir.as_os_str().as_bytes())?, cstr(b"tmpfs")?);
    let data = cstr(format!("size={mb}m,mode=0755").as_bytes())?;
    // SAFETY: mount(2) with NUL-terminated strings that outlive the call.
    let rc =
        unsafe { libc::mount(source.as_ptr(), target.as_ptr(), fstype.as_ptr(), 0, data.as_ptr().cast()) };
    if rc != 0 {
        return Err(HarnessError::Io {
            context: format!(
                "mounting a {mb} MiB tmpfs at {} for ClusterConfig::log_disk_mb (needs CAP_SYS_ADMIN)",
                dir.display()
            ),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

fn not_configured(what: &str, option: &str) -> HarnessError {
    HarnessError::Io {
        context: what.to_string(),
        source: std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            format!("the cluster was started without ClusterConfig::{option}"),
        ),
    }
}

impl ZkCluster {
    /// Delays every `fsync`/`fdatasync` of server `i` by `delay` from now until
    /// [`ZkCluster::unstall_disk`]: its writes hang (a transaction is acknowledged once its log
    /// is synced) while it still answers pings and reads. Zero ends the stall.
    ///
    /// # Errors
    /// [`HarnessError::NoSuchNode`]; [`HarnessError::Io`] when the cluster was started without
    /// [`ClusterConfig::disk_stall`].
    pub fn stall_disk(&self, i: usize, delay: Duration) -> Result<(), HarnessError> {
        let node = self.node(i)?;
        if self.grey.shim.is_none() {
            return Err(not_configured("stall_disk", "disk_stall"));
        }
        let file = stall_file(node);
        // Written whole and renamed into place, so the shim never reads half a number.
        let tmp = file.with_extension("new");
        std::fs::write(&tmp, delay.as_millis().to_string())
            .and_then(|()| std::fs::rename(&tmp, &file))
            .map_err(HarnessError::io(format!("writing {}", file.display())))
    }

    /// Ends [`ZkCluster::stall_disk`] on server `i`.
    ///
    /// # Errors
    /// As [`ZkCluster::stall_disk`].
    pub fn unstall_disk(&self, i: usize) -> Result<(), HarnessError> {
        self.stall_disk(i, Duration::ZERO)
    }

    /// Fills server `i`'s transaction-log disk: a filler file takes every free byte, so the
    /// server's next log write fails with `ENOSPC`. Returns the filler's size in bytes.
    ///
    /// # Errors
    /// [`HarnessError::NoSuchNode`]; [`HarnessError::Io`] when the cluster was started without
    /// [`ClusterConfig::log_disk_mb`], or the filler cannot be created.
    pub fn fill_log_disk(&self, i: usize) -> Result<u64, HarnessError> {
        let node = self.node(i)?;
        if self.config.log_disk_mb.is_none() {
            return Err(not_configured("fill_log_disk", "log_disk_mb"));
        }
        let path = filler(node);
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(HarnessError::io(format!("creating {}", path.display())))?;
        // Whole blocks at once, then what is left a page at a time until the disk refuses.
        let chunk = vec![0u8; 1 << 20];
        let mut written = 0u64;
        for size in [chunk.len(), 4096, 512] {
            while file.write_all(&chunk[..size]).is_ok() {
                written += size as u64;
            }
        }
        let _ = file.sync_all();
        Ok(written)
    }

    /// Deletes the filler of [`ZkCluster::fill_log_disk`] on server `i` (a server that exited
    /// on the full disk stays down: [`ZkCluster::restart`] it).
    ///
    /// # Errors
    /// As [`ZkCluster::fill_log_disk`].
    pub fn free_log_disk(&self, i: usize) -> Result<(), HarnessError> {
        let node = self.node(i)?;
        if self.config.log_disk_mb.is_none() {
            return Err(not_configured("free_log_disk", "log_disk_mb"));
        }
        match std::fs::remove_file(filler(node)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(HarnessError::Io { context: "removing the log disk's filler".into(), source: e })
            }
            _ => Ok(()),
        }
    }

    /// Restarts server `i` with no data: stopped, its snapshots and transaction logs deleted
    /// (`version-2` in its data directory and, with [`ClusterConfig::log_disk_mb`], in its log
    /// disk; its `myid` stays), started again. It rejoins with nothing and takes the leader's
    /// state. This is what an operator does after a server ran out of transaction-log disk,
    /// until ZooKeeper has the fix of ZOOKEEPER-4882: such a server can lose, at its next
    /// restart, transactions it had acknowledged. Safe only while the other servers are a
    /// quorum that holds every committed transaction (one server at a time, the others up).
    /// Local backend only.
    ///
    /// # Errors
    /// As [`ZkCluster::restart`]; [`HarnessError::Io`] when the data cannot be deleted.
    pub async fn restart_with_empty_data(&mut self, i: usize) -> Result<(), HarnessError> {
        self.stop(i).await?;
        let node = self.node(i)?;
        let mut dirs = vec![node.dir.join("data").join("version-2")];
        if self.config.log_disk_mb.is_some() {
            dirs.push(log_dir(node).join("version-2"));
        }
        for dir in dirs {
            match std::fs::remove_dir_all(&dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(HarnessError::Io {
                        context: format!("deleting {}", dir.display()),
                        source: e,
                    });
                }
                _ => {}
            }
        }
        tracing::debug!(server = i, "restarting with empty data");
        self.restart(i).await
    }

    /// Server `i`'s log file (its stdout and stderr), to look for what a fault did to it.
    ///
    /// # Errors
    /// [`HarnessError::NoSuchNode`].
    pub fn server_log(&self, i: usize) -> Result<PathBuf, HarnessError> {
        Ok(self.node(i)?.log_path())
    }

    /// Whether server `i`'s process has exited on its own (it was started and not stopped by
    /// the harness, but is gone; a crash or a `System.exit` of ZooKeeper's).
    pub fn has_exited(&mut self, i: usize) -> bool {
        let Some(node) = self.nodes.get_mut(i) else { return false };
        node.child.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_some())
    }

    /// Holds back everything server `from` sends to server `to`, while what `to` sends to
    /// `from` still flows, until [`ZkCluster::heal_partition`]: a one-way partition. Both kinds
    /// of connection are covered: those `from` opened to `to` (its requests held) and those `to`
    /// opened to `from` (`from`'s replies held).
    ///
    /// # Errors
    /// As [`ZkCluster::partition`]; also [`HarnessError::NoSuchNode`] when `from == to`.
    pub fn partition_one_way(&self, from: usize, to: usize) -> Result<(), HarnessError> {
        let (out, back) = self.pair(from, to)?;
        out.proxy.hold_requests();
        back.proxy.hold_replies();
        tracing::debug!(from, to, "one-way partition");
        Ok(())
    }

    /// Delays everything server `from` sends to server `to` by `delay` (zero removes it): with
    /// `from` the leader and `to` a follower below `syncLimit` ticks, a follower that serves its
    /// clients a view `delay` behind the leader's.
    ///
    /// # Errors
    /// As [`ZkCluster::partition_one_way`].
    pub fn delay_link(&self, from: usize, to: usize, delay: Duration) -> Result<(), HarnessError> {
        let (out, back) = self.pair(from, to)?;
        out.proxy.set_request_latency(delay);
        back.proxy.set_reply_latency(delay);
        Ok(())
    }

    fn pair(&self, from: usize, to: usize) -> Result<(&super::Link, &super::Link), HarnessError> {
        if self.links.is_empty() {
            return Err(HarnessError::NotPartitionable);
        }
        self.node(from)?;
        self.node(to)?;
        match (self.link(from, to), self.link(to, from)) {
            (Some(out), Some(back)) => Ok((out, back)),
            _ => Err(HarnessError::NoSuchNode(to)),
        }
    }
}
