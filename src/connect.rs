//! Connecting with typed errors, a bounded wait, credentials and chroot handling.

use std::time::Duration;

use zookeeper_client::{Acls, Client, CreateMode, Error as ZkError};

use crate::error::{Error, Result};

/// How to connect. `ConnectOptions::new(timeout)` is what [`connect`] uses.
#[derive(Clone)]
pub struct ConnectOptions {
    session_timeout: Duration,
    auth: Vec<(String, Vec<u8>)>,
    create_chroot: bool,
}

impl std::fmt::Debug for ConnectOptions {
    /// Credentials never reach logs: only their schemes are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let schemes: Vec<&str> = self.auth.iter().map(|(scheme, _)| scheme.as_str()).collect();
        f.debug_struct("ConnectOptions")
            .field("session_timeout", &self.session_timeout)
            .field("auth", &format_args!("{schemes:?} (credentials redacted)"))
            .field("create_chroot", &self.create_chroot)
            .finish()
    }
}

impl ConnectOptions {
    /// A session timeout; no credentials; a missing chroot is an error.
    pub fn new(session_timeout: Duration) -> ConnectOptions {
        ConnectOptions { session_timeout, auth: Vec::new(), create_chroot: false }
    }

    /// Adds credentials, e.g. `auth("digest", b"user:password")`. Nodes created with
    /// [`Acls::creator_all`] (see [`crate::LockOptions::acls`]) are then ours alone.
    pub fn auth(mut self, scheme: &str, credentials: &[u8]) -> ConnectOptions {
        self.auth.push((scheme.to_string(), credentials.to_vec()));
        self
    }

    /// Creates the connect string's chroot (`host:port/app`) when it does not exist, instead of
    /// failing with [`Error::ChrootMissing`].
    pub fn create_chroot(mut self, create: bool) -> ConnectOptions {
        self.create_chroot = create;
        self
    }
}

/// Connects to `connect` (`host:port,host:port[/chroot]`) with the given session timeout.
///
/// The wait is bounded: an unreachable ensemble gives [`Error::Connect`] after about the session
/// timeout, never a hang.
///
/// # Errors
/// [`Error::Connect`] with the client's reason; [`Error::ChrootMissing`].
///
/// # Cancel safety
/// Cancel-safe: dropping the future abandons the attempt.
pub async fn connect(connect: &str, session_timeout: Duration) -> Result<Client> {
    connect_with(connect, &ConnectOptions::new(session_timeout)).await
}

/// Connects with [`ConnectOptions`]: credentials, and a chroot that is checked (or created).
///
/// # Errors
/// [`Error::Connect`]; [`Error::ChrootMissing`] when the chroot does not exist and
/// `create_chroot` is off; [`Error::NoAuth`] when creating the chroot is refused.
///
/// # Cancel safety
/// Cancel-safe: dropping the future abandons the attempt.
pub async fn connect_with(connect: &str, options: &ConnectOptions) -> Result<Client> {
    let (servers, chroot) = match connect.find('/') {
        Some(at) if at + 1 < connect.len() => (&connect[..at], Some(&connect[at..])),
        _ => (connect, None),
    };
    let client = open(servers, options, connect).await?;
    let Some(chroot) = chroot else { return Ok(client) };
    match client.check_stat(chroot).await {
        Ok(Some(_)) => {}
        Ok(None) if options.create_chroot => {
            client
                .mkdir(chroot, &CreateMode::Persistent.with_acls(Acls::anyone_all()))
                .await
                .map_err(Error::zk("create chroot", chroot))?;
        }
        Ok(None) => return Err(Error::ChrootMissing { chroot: chroot.to_string() }),
        Err(e) => return Err(Error::from_zk("check chroot", chroot, e)),
    }
    client.chroot(chroot).map_err(|_| Error::InvalidPath {
        path: chroot.to_string(),
        reason: crate::error::PathError::NotAbsolute,
    })
}

async fn open(servers: &str, options: &ConnectOptions, shown: &str) -> Result<Client> {
    let bound = options.session_timeout.saturating_mul(2).max(Duration::from_secs(2));
    let mut connector = Client::connector().with_session_timeout(options.session_timeout);
    for (scheme, credentials) in &options.auth {
        connector = connector.with_auth(scheme, credentials);
    }
    match tokio::time::timeout(bound, connector.connect(servers)).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(source)) => Err(Error::Connect { connect: shown.to_string(), source }),
        Err(_) => Err(Error::Connect { connect: shown.to_string(), source: ZkError::Timeout }),
    }
}
