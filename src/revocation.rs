//! Asking a holder to release, as Curator's `Revoker`.

use zookeeper_client::{Client, Error as ZkError};

use crate::error::{Error, Result};
use crate::hold::REVOKE;

/// Asks the holder of the lock node at `node_path` to release it, by setting the node's data to
/// `__REVOKE__` (Curator's convention). The holder sees
/// [`crate::LockStatus::RevocationRequested`] on its status channel and decides; nothing is
/// forced. Returns `false` if the node no longer exists.
///
/// # Errors
/// [`Error::NoAuth`] when the node's ACL refuses us; [`Error::SessionExpired`];
/// [`Error::ZooKeeper`] for other failures.
///
/// # Cancel safety
/// The request is sent when this is called; dropping the future does not withdraw it.
pub async fn request_revocation(client: &Client, node_path: &str) -> Result<bool> {
    match client.set_data(node_path, REVOKE, None).await {
        Ok(_) => Ok(true),
        Err(ZkError::NoNode) => Ok(false),
        Err(e) => Err(Error::from_zk("revoke", node_path, e)),
    }
}
