//! Connecting as the global flags say: the connect string, the session timeout, TLS and SASL.

use std::time::Duration;

use zk_recipes::{NodeFormat, TlsConfig};

use crate::args::Cli;
use crate::exit::{self, Failure};
use crate::zk::{self, Conn};

impl Cli {
    pub fn format(&self) -> NodeFormat {
        self.format.unwrap_or_default()
    }

    /// Connects within `--connect-timeout` (see [`Cli::connect_within`]).
    pub async fn connect(&self) -> Result<Conn, Failure> {
        self.connect_within(None).await
    }

    /// Connects, giving up (exit 69) after `--connect-timeout` or `bound` (a `--timeout`),
    /// whichever is shorter, and says on stderr when the server set another session timeout
    /// than the one asked for (always for a `--session-timeout` given, with `-v` for the
    /// default).
    pub async fn connect_within(&self, bound: Option<Duration>) -> Result<Conn, Failure> {
        let target = zk::Target {
            connect: self.connect.as_deref(),
            session_timeout: self.session_timeout,
            tls: tls(self)?,
            sasl: self.sasl.config()?,
            auth: self.auth.as_deref(),
        };
        let shown = target.connect.unwrap_or_default().to_string();
        let limit = match (self.connect_timeout, bound) {
            (Some(a), Some(b)) => Some((a.min(b), if a <= b { "--connect-timeout" } else { "--timeout" })),
            (Some(a), None) => Some((a, "--connect-timeout")),
            (None, Some(b)) => Some((b, "--timeout")),
            (None, None) => None,
        };
        let conn = match limit {
            None => zk::connect(target).await?,
            Some((limit, flag)) => match tokio::time::timeout(limit, zk::connect(target)).await {
                Ok(conn) => conn?,
                Err(_) => {
                    return Err(Failure::new(
                        exit::UNAVAILABLE,
                        format!(
                            "cannot connect to {shown}: no session within {flag} {}",
                            humantime::format_duration(limit)
                        ),
                    ))
                }
            },
        };
        let asked = self.session_timeout.unwrap_or(zk::DEFAULT_SESSION_TIMEOUT);
        let got = conn.session().session_timeout();
        // ZooKeeper counts whole milliseconds: 1.5005s asked is 1.5s asked.
        if got != Duration::from_millis(asked.as_millis() as u64)
            && (self.session_timeout.is_some() || self.verbose)
        {
            let default = if self.session_timeout.is_none() { "the default " } else { "" };
            crate::say::say(
                crate::say::Level::Info,
                &format!(
                    "note: the server set the session timeout to {} (asked for {default}{})",
                    humantime::format_duration(got),
                    humantime::format_duration(asked)
                ),
            );
        }
        Ok(conn)
    }
}

/// The TLS settings the flags ask for, if any.
fn tls(cli: &Cli) -> Result<Option<TlsConfig>, Failure> {
    let usage = |message: &str| Failure::new(exit::USAGE, message);
    let identity = match (&cli.tls_cert, &cli.tls_key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => return Err(usage("--tls-cert and --tls-key go together")),
    };
    let Some(ca) = &cli.tls_ca else {
        return match identity {
            Some(_) => Err(usage("--tls-cert needs --tls-ca (the CA that signed the servers' certificates)")),
            None => Ok(None),
        };
    };
    let mut tls = TlsConfig::from_ca_file(ca)?;
    if let Some((cert, key)) = identity {
        tls = tls.with_identity_files(cert, key)?;
    }
    Ok(Some(tls))
}
