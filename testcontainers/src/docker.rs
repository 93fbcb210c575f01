//! The Docker backend's entry point. Without the `docker` feature it only explains how to get it.

use crate::local::INSTALL_HINT;
use crate::HarnessError;

/// The error for "the Docker backend was asked for (or is the only option) but can't run".
#[cfg(not(feature = "docker"))]
pub(crate) fn unavailable() -> HarnessError {
    HarnessError::NoBackend(format!(
        "the Docker backend is not compiled in (cargo feature `zk-testcluster/docker`) and no local \
         ZooKeeper was found; {INSTALL_HINT}"
    ))
}
