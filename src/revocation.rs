//! Asking a holder to release, as Curator's `Revoker`.

use zookeeper_client::{Client, Error as ZkError};

use crate::error::{Error, Result};
use crate::markers::REVOKE;
use crate::session::Session;

/// Asks the holder of the lock node at `node_path` to release it, by setting the node's data to
/// `__REVOKE__` (Curator's convention), through `session` (waiting for it to be connected). The
/// holder sees [`crate::LockStatus::RevocationRequested`] on its status channel and decides;
/// nothing is forced. Returns `false` if the node no longer exists.
///
/// The lock handles' `revoke_holders()` finds the holders and asks each of them.
///
/// # Errors
/// [`Error::NoAuth`] when the node's ACL refuses us; [`Error::SessionClosed`];
/// [`Error::SessionExpired`] if the session expired before the request was answered;
/// [`Error::ZooKeeper`] for other failures.
///
/// # Cancel safety
/// Once the request is sent, dropping the future does not withdraw it.
pub async fn request_revocation(session: &Session, node_path: &str) -> Result<bool> {
    let conn = session.shared().wait_conn().await?;
    revoke_node(&conn.client, node_path).await
}

/// Sets `__REVOKE__` on `node_path` with `client`; `false` if the node is gone.
pub(crate) async fn revoke_node(client: &Client, node_path: &str) -> Result<bool> {
    match client.set_data(node_path, REVOKE, None).await {
        Ok(_) => Ok(true),
        Err(ZkError::NoNode) => Ok(false),
        Err(e) => Err(Error::from_zk("revoke", node_path, e)),
    }
}
