//! Which ZooKeeper version each node runs: chosen at start ([`ClusterConfig::version`],
//! [`ClusterConfig::node_versions`]), checked against `srvr`, changed by [`ZkCluster::restart_as`].

use super::{ClusterConfig, ZkCluster};
use crate::local::LocalInstall;
use crate::{HarnessError, ZkVersion};

/// Each node's version and install, in node order: every distinct version looked up once.
pub(super) fn installs(config: &ClusterConfig) -> Result<Vec<(ZkVersion, LocalInstall)>, HarnessError> {
    let mut found: Vec<(ZkVersion, LocalInstall)> = Vec::new();
    (0..config.nodes.max(1))
        .map(|i| {
            let version = config.node_versions.get(i).copied().unwrap_or(config.version);
            if let Some((_, install)) = found.iter().find(|(v, _)| *v == version) {
                return Ok((version, install.clone()));
            }
            let install = LocalInstall::find(version)?;
            found.push((version, install.clone()));
            Ok((version, install))
        })
        .collect()
}

impl ZkCluster {
    /// The version node `i` was started as ([`ClusterConfig::version`],
    /// [`ClusterConfig::node_versions`], [`ZkCluster::restart_as`]). With `ZOOKEEPER_HOME` and no
    /// `ZK_VERSION`, what the harness asked for is not what runs: [`ZkCluster::server_version`]
    /// says what does.
    ///
    /// # Errors
    /// [`HarnessError::NoSuchNode`].
    pub fn version(&self, i: usize) -> Result<ZkVersion, HarnessError> {
        Ok(self.node(i)?.version)
    }

    /// The version node `i` reports in `srvr` (`Zookeeper version: 3.9.3-...`).
    ///
    /// # Errors
    /// [`HarnessError::NoSuchNode`]; [`HarnessError::Io`] when the node does not answer;
    /// [`HarnessError::WrongVersion`] (with `got: None`) when its answer names no version.
    pub async fn server_version(&self, i: usize) -> Result<ZkVersion, HarnessError> {
        let srvr = self.four_letter(i, "srvr").await?;
        ZkVersion::from_srvr(&srvr).ok_or(HarnessError::WrongVersion {
            node: i,
            asked: self.node(i)?.version,
            got: None,
        })
    }

    /// Fails unless node `i` reports the version its install promises. An install that promises
    /// none (`ZOOKEEPER_HOME` without `ZK_VERSION`) only has its version logged.
    pub(super) async fn check_version(&self, i: usize) -> Result<(), HarnessError> {
        let node = self.node(i)?;
        let Some(install) = &node.install else { return Ok(()) };
        let got = ZkVersion::from_srvr(&self.four_letter(i, "srvr").await?);
        match install.expect {
            Some(asked) if got != Some(asked) => Err(HarnessError::WrongVersion { node: i, asked, got }),
            Some(_) => Ok(()),
            None => {
                tracing::info!(node = i, version = ?got, "ZOOKEEPER_HOME's server reports its version");
                Ok(())
            }
        }
    }

    /// Stops node `i` and starts it again as ZooKeeper `version`, on the same ports, with the same
    /// data directory and configuration: one step of a rolling upgrade (or downgrade). Returns
    /// once it serves and reports `version`; later [`ZkCluster::restart`]s keep that version.
    /// Local backend only.
    ///
    /// # Errors
    /// [`HarnessError::MissingVersion`] (before anything is stopped) when `version` is not
    /// unpacked here; [`HarnessError::Unsupported`] on the Docker backend; otherwise as
    /// [`ZkCluster::restart`].
    pub async fn restart_as(&mut self, i: usize, version: ZkVersion) -> Result<(), HarnessError> {
        let node = self.node(i)?;
        if node.install.is_none() {
            return Err(HarnessError::Unsupported("restart_as", "docker"));
        }
        let install = LocalInstall::find(version)?;
        self.stop(i).await?;
        let node = &mut self.nodes[i];
        node.version = version;
        node.install = Some(install);
        self.restart(i).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that reports another version than its install promises fails the start, naming
    /// both (here 3.9.3's jars promised as 3.9.6).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_of_another_version_fails_the_start_naming_both() {
        let mut install =
            LocalInstall::find(ZkVersion::V3_9_3).expect("scripts/ensure-zookeeper-versions 3.9.3");
        install.expect = Some(ZkVersion::V3_9_6);
        let config = ClusterConfig::default();
        let mut cluster = ZkCluster::prepare(config, &[(ZkVersion::V3_9_6, install)]).expect("prepare");
        let err = cluster.launch_all().await.expect_err("3.9.3 is not 3.9.6");
        assert!(
            matches!(
                err,
                HarnessError::WrongVersion {
                    node: 0,
                    asked: ZkVersion::V3_9_6,
                    got: Some(ZkVersion::V3_9_3)
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("asked to run 3.9.6 but reports 3.9.3"), "{err}");
    }
}
