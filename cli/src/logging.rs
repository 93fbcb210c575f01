//! Log events (the library's spans and warnings, and zklock's own) on stderr, never on stdout:
//! RUST_LOG picks them (default: warn), `--log-format` writes them as text or JSON lines.

use std::io::IsTerminal;

use tracing_subscriber::filter::{Directive, EnvFilter, LevelFilter};

use crate::args::LogFormat;

/// The library's own note on a session timeout the server bounded: zklock says it in its own
/// words (`note: the server set the session timeout to ...`), so under the default filter the
/// library's warning would say it twice. Its other warnings there (Nagle's algorithm) are for
/// a library user's logs. The client crate's warnings on a connection it could not set up
/// (authentication refused; a 3.9 server refusing a TLS client without a certificate, logged
/// once per try) repeat the error zklock reports in one line. Set RUST_LOG to see them.
const QUIET_BY_DEFAULT: [&str; 2] = ["zk_recipes::session::shared=error", "zookeeper_client::session=error"];

/// The filter: RUST_LOG when set (an invalid directive is skipped, as EnvFilter does), else
/// warnings and errors.
fn filter() -> EnvFilter {
    let builder = EnvFilter::builder().with_default_directive(LevelFilter::WARN.into());
    match std::env::var(EnvFilter::DEFAULT_ENV) {
        Ok(value) if !value.trim().is_empty() => builder.parse_lossy(value),
        _ => {
            let mut filter = builder.parse_lossy("");
            for quiet in QUIET_BY_DEFAULT.iter().filter_map(|d| d.parse::<Directive>().ok()) {
                filter = filter.add_directive(quiet);
            }
            filter
        }
    }
}

/// Installs the subscriber. Called once, before anything logs.
pub fn init(format: LogFormat) {
    crate::say::set_json(matches!(format, LogFormat::Json));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    // Another subscriber already set would be a bug of ours; logging is not worth failing for.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
