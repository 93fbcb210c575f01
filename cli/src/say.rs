//! zklock's own messages on stderr: `zklock: MESSAGE` lines, or under `--log-format json` one
//! JSON object per line, shaped as the log events are (`timestamp`, `level`,
//! `fields.message`, `target` "zklock"; a failure adds `fields.exit_code`), so that every
//! stderr line of zklock is an object a machine can read. The command's own stderr is its own.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static JSON: AtomicBool = AtomicBool::new(false);

/// How serious a message is, as the log levels name it.
#[derive(Clone, Copy)]
pub enum Level {
    Error,
    Warn,
    Info,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::Error => "ERROR",
            Level::Warn => "WARN",
            Level::Info => "INFO",
        }
    }
}

/// Messages go out as JSON from now on.
pub fn set_json(on: bool) {
    JSON.store(on, Ordering::Relaxed);
}

/// Whether messages go out as JSON.
pub fn json() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// Whether the raw arguments or the environment ask for JSON logs: for a usage error, said
/// before the arguments could be parsed.
pub fn asked_in_args() -> bool {
    let args: Vec<String> = std::env::args().collect();
    let flag = args.iter().position(|a| a == "--log-format").and_then(|i| args.get(i + 1));
    flag.map(String::as_str) == Some("json")
        || args.iter().any(|a| a == "--log-format=json")
        || (flag.is_none() && std::env::var("ZKLOCK_LOG_FORMAT").is_ok_and(|v| v == "json"))
}

/// One line: `message` is without the `zklock: ` prefix (given, it is dropped).
pub fn line(level: Level, message: &str, exit_code: Option<u8>) -> String {
    let message = message.strip_prefix("zklock: ").unwrap_or(message);
    if !json() {
        return format!("zklock: {message}");
    }
    let mut fields = serde_json::json!({ "message": message });
    if let Some(code) = exit_code {
        fields["exit_code"] = code.into();
    }
    serde_json::json!({
        "timestamp": humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string(),
        "level": level.name(),
        "fields": fields,
        "target": "zklock",
    })
    .to_string()
}

/// Says `message` on stderr.
pub fn say(level: Level, message: &str) {
    let _ = writeln!(std::io::stderr(), "{}", line(level, message, None));
}

/// Says why zklock exits with `code`.
pub fn failure(code: u8, message: &str) {
    let _ = writeln!(std::io::stderr(), "{}", line(Level::Error, message, Some(code)));
}
