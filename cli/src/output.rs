//! What the subcommands print alike: JSON lines, and the clock that the ages they show are
//! counted to.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::exit::{self, Failure};

/// The wall clock now, in milliseconds since the epoch (as ZooKeeper's `ctime` and `mtime`).
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Prints `value` as one line of JSON.
///
/// # Errors
/// A value that does not serialize (exit 69).
pub fn print_json(value: &impl Serialize) -> Result<(), Failure> {
    // One object per line, whatever the command: what a script's `read -r` gets whole.
    let text = serde_json::to_string(value).map_err(|e| Failure::new(exit::UNAVAILABLE, e.to_string()))?;
    println!("{text}");
    Ok(())
}
