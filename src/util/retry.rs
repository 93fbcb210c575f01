//! Retrying a request across connection losses.
//!
//! The client fails in-flight requests with a connection-level error when a connection drops
//! (see [`crate::error::is_connection_loss`]) and queues new ones until it reconnects; once the
//! session expires every call fails with `SessionExpired`. So a retry loop on connection loss
//! ends: with an answer, or with expiry.

use std::future::Future;
use std::time::Duration;

use zookeeper_client::Error as ZkError;

use crate::error::is_connection_loss;

/// Calls `op` until its result is anything but a connection loss, backing off a little between
/// tries (the next request waits for the reconnection anyway).
pub(crate) async fn on_connection_loss<T, F, Fut>(mut op: F) -> Result<T, ZkError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ZkError>>,
{
    let mut pause = Duration::from_millis(5);
    loop {
        match op().await {
            Err(e) if is_connection_loss(&e) => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(250));
            }
            other => return other,
        }
    }
}
