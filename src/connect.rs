//! Connecting with typed errors and a bounded wait.

use std::time::Duration;

use zookeeper_client::Client;

use crate::error::{Error, Result};

/// Connects to `connect` (`host:port,host:port[/chroot]`) with the given session timeout.
///
/// The wait is bounded: an unreachable ensemble gives [`Error::Connect`] after about the session
/// timeout, never a hang.
///
/// # Errors
/// [`Error::Connect`] with the client's reason.
///
/// # Cancel safety
/// Cancel-safe: dropping the future abandons the attempt.
pub async fn connect(connect: &str, session_timeout: Duration) -> Result<Client> {
    let bound = session_timeout.saturating_mul(2).max(Duration::from_secs(2));
    let attempt = Client::connector().with_session_timeout(session_timeout).connect(connect);
    match tokio::time::timeout(bound, attempt).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(source)) => Err(Error::Connect { connect: connect.to_string(), source }),
        Err(_) => {
            Err(Error::Connect { connect: connect.to_string(), source: zookeeper_client::Error::Timeout })
        }
    }
}
