//! Exit codes (documented in `--help`) and how errors map to them.

use std::process::ExitCode;

/// The lock is busy (`--no-wait`) or was not acquired within `--timeout` (EX_TEMPFAIL).
pub const BUSY: u8 = 75;
/// The lock (or leadership) was lost while the command ran; the command was stopped.
pub const LOST: u8 = 76;
/// `run --once-per`: a run succeeded within the period (on any host); the command was not
/// run. Outside sysexits' 64–78, so that it cannot be taken for one of those.
pub const DONE: u8 = 79;
/// `run --max-hold` passed: the command was stopped (SIGTERM, then SIGKILL by the kill
/// deadline) and the lock released. 124, as timeout(1) when its command times out.
pub const MAX_HOLD: u8 = 124;
/// ZooKeeper could not be reached, the session ended, or authentication failed (EX_UNAVAILABLE).
pub const UNAVAILABLE: u8 = 69;
/// A bad lock path, a path holding the other naming format's nodes, or other bad input (EX_USAGE).
pub const USAGE: u8 = 64;
/// Nothing to act on (`break`/`revoke` found no holder), or `break` was not confirmed.
pub const NOTHING: u8 = 1;
/// zklock was ended by SIGINT while waiting (128 + 2), after deleting its queue node.
pub const INTERRUPTED: u8 = 130;
/// zklock was ended by SIGTERM while waiting (128 + 15), after deleting its queue node.
pub const TERMINATED: u8 = 143;
/// The command could not be executed (as a shell does).
pub const NOT_EXECUTABLE: u8 = 126;
/// The command was not found (as a shell does).
pub const NOT_FOUND: u8 = 127;

/// An error that ends `zklock` with one line on stderr and an exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure { code, message: message.into() }
    }

    /// An exit code with nothing to say (the code says it: 130, 143).
    pub fn silent(code: u8) -> Failure {
        Failure { code, message: String::new() }
    }

    pub fn report(self) -> ExitCode {
        if !self.message.is_empty() {
            crate::say::failure(self.code, &self.message);
        }
        ExitCode::from(self.code)
    }
}

impl From<zk_recipes::Error> for Failure {
    fn from(e: zk_recipes::Error) -> Failure {
        use zk_recipes::Error as E;
        let code = match &e {
            E::InvalidPath { .. }
            | E::BadLeaseCount { .. }
            | E::FormatConflict { .. }
            | E::RecipeConflict { .. }
            | E::InvalidSessionTimeout { .. }
            | E::InvalidBeatPeriod { .. }
            | E::UnsupportedFormat { .. }
            | E::LeaseMaxMismatch { .. }
            | E::Tls { .. } => USAGE,
            E::LockLost { .. } | E::NodeDeleted { .. } => LOST,
            E::Timeout(_) => BUSY,
            _ => UNAVAILABLE,
        };
        Failure::new(code, e.to_string())
    }
}

/// The exit code that reports a child's status: its code, or 128 + the signal that ended it.
pub fn of_status(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128u8.saturating_add(signal as u8),
        (None, None) => 1,
    }
}

/// The safe window ran out with no reply from ZooKeeper: the command was stopped.
pub fn window_spent(path: &str) -> Failure {
    Failure::new(
        LOST,
        format!(
            "no reply from ZooKeeper vouched for holding {path} any more (the session's safe window \
             ran out); stopped the command"
        ),
    )
}
