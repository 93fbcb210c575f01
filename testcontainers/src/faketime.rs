//! Faked clocks for one process: Debian's libfaketime (`faketime` package), preloaded.
//!
//! [`FakeClock::env`] gives the environment that makes a process (a ZooKeeper server through
//! [`crate::ZkCluster::restart_with_env`], or any child a test spawns) see its clocks run at
//! another rate, or its wall clock stepped. libfaketime interposes `clock_gettime` (which Rust's
//! `Instant`, tokio's timer and the JVM's `System.nanoTime` all call through libc), `time`,
//! `gettimeofday`, and the sleeping calls (`nanosleep`, `poll`, `epoll_wait`,
//! `pthread_cond_timedwait`, ...), whose timeouts it scales by the rate: a process at 2× sleeps
//! half as long in real time for the same requested duration.

use std::path::{Path, PathBuf};

use crate::HarnessError;

/// Where Debian's `libfaketime` package puts the multi-threaded library (the one to preload into
/// a multi-threaded process: a tokio runtime, a JVM).
const DEBIAN_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// How a process's clocks are faked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FakeClock {
    /// Every clock (`CLOCK_REALTIME` and `CLOCK_MONOTONIC` alike) runs at this rate from the
    /// process's start: 2.0 is twice as fast as the machine's, 0.5 half as fast.
    Rate(f64),
    /// The wall clock (`CLOCK_REALTIME`) shows this many seconds more (negative: fewer) than the
    /// machine's; the monotonic clocks are left alone.
    WallOffset(i64),
}

impl FakeClock {
    /// The environment that gives a process this clock: `LD_PRELOAD` of libfaketime and its
    /// `FAKETIME` setting. `FAKETIME_LIB` names the library when it is not where Debian puts it.
    ///
    /// # Errors
    /// [`HarnessError::NotInstalled`] when the library is not there (`apt-get install faketime`).
    pub fn env(self) -> Result<Vec<(String, String)>, HarnessError> {
        let lib = library()?;
        let mut env = vec![("LD_PRELOAD".to_string(), lib.display().to_string())];
        match self {
            FakeClock::Rate(rate) => {
                env.push(("FAKETIME".into(), format!("+0 x{rate}")));
                env.push(("FAKETIME_DONT_FAKE_MONOTONIC".into(), "0".into()));
            }
            FakeClock::WallOffset(secs) => {
                env.push(("FAKETIME".into(), format!("{secs:+}")));
                env.push(("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()));
            }
        }
        Ok(env)
    }

    /// The environment for a wall clock that steps while the process runs: libfaketime reads
    /// the offset from `file` (for example `+3600`, `-3600`, `+0`; rewrite the file to step the
    /// clock) at most once a second; the monotonic clocks are left alone.
    ///
    /// # Errors
    /// As [`FakeClock::env`].
    pub fn wall_steps_env(file: &Path) -> Result<Vec<(String, String)>, HarnessError> {
        Ok(vec![
            ("LD_PRELOAD".to_string(), library()?.display().to_string()),
            ("FAKETIME_TIMESTAMP_FILE".into(), file.display().to_string()),
            ("FAKETIME_CACHE_DURATION".into(), "1".into()),
            ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        ])
    }
}

/// The libfaketime library to preload.
///
/// # Errors
/// [`HarnessError::NotInstalled`] when it is missing.
pub fn library() -> Result<PathBuf, HarnessError> {
    let lib = std::env::var_os("FAKETIME_LIB").map_or_else(|| PathBuf::from(DEBIAN_LIB), PathBuf::from);
    if Path::new(&lib).exists() {
        Ok(lib)
    } else {
        Err(HarnessError::NotInstalled {
            resource: "libfaketime",
            hint: format!(
                "no {}; install Debian's `faketime` package (apt-get install faketime) or set FAKETIME_LIB",
                lib.display()
            ),
        })
    }
}
