//! The Docker backend (cargo feature `docker`): a standalone ZooKeeper container started through
//! the `testcontainers` crate. Without the feature, only the explanation of how to get it.
//!
//! It runs `bitnamilegacy/zookeeper` (the `bitnami/zookeeper` images moved there). Lifecycle goes
//! through `testcontainers` (the container is removed when the cluster drops); freeze, thaw and
//! kill go through the `docker` CLI (`pause`, `unpause`, `kill`), which `testcontainers` lacks.
//! Ensembles and `restart` (the host port would change) are not offered.

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

#[cfg(feature = "docker")]
pub(crate) use with_docker::DockerNode;

#[cfg(feature = "docker")]
mod with_docker {
    use std::process::Command;

    use testcontainers_modules::testcontainers::runners::AsyncRunner;
    use testcontainers_modules::testcontainers::{ContainerAsync, Image, ImageExt};
    use testcontainers_modules::zookeeper::Zookeeper;

    use super::INSTALL_HINT;
    use crate::{ClusterConfig, HarnessError};

    const IMAGE: &str = "bitnamilegacy/zookeeper";

    /// The client port inside the image, from the image's own configuration (`ZOO_PORT_NUMBER`
    /// in `docker image inspect`); the host side is a free port Docker picks.
    fn image_client_port(tag: &str) -> Result<u16, HarnessError> {
        let out = Command::new("docker")
            .args([
                "image",
                "inspect",
                "--format",
                "{{range .Config.Env}}{{println .}}{{end}}",
                &format!("{IMAGE}:{tag}"),
            ])
            .output()
            .map_err(HarnessError::io("docker image inspect"))?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("ZOO_PORT_NUMBER=")?.trim().parse().ok())
            .ok_or_else(|| {
                HarnessError::NoBackend(format!(
                    "{IMAGE}:{tag} does not say its client port (ZOO_PORT_NUMBER)"
                ))
            })
    }

    /// One ZooKeeper container.
    pub(crate) struct DockerNode {
        container: ContainerAsync<Zookeeper>,
        pub port: u16,
    }

    impl DockerNode {
        pub(crate) async fn start(config: &ClusterConfig) -> Result<DockerNode, HarnessError> {
            if config.nodes > 1 {
                return Err(HarnessError::Unsupported("an ensemble", "docker"));
            }
            let tick = config.tick_time.as_millis().max(1);
            let container = Zookeeper::default()
                .with_name(IMAGE)
                .with_env_var("ZOO_TICK_TIME", tick.to_string())
                .with_env_var("ZOO_MAX_SESSION_TIMEOUT", config.max_session_timeout.as_millis().to_string())
                .with_env_var("ZOO_MAX_CNXNS", config.max_client_cnxns.to_string())
                .with_env_var("ZOO_4LW_COMMANDS_WHITELIST", "*")
                .start()
                .await
                .map_err(|e| {
                    HarnessError::NoBackend(format!(
                        "Docker backend: {e}; is a Docker daemon running? Else {INSTALL_HINT}"
                    ))
                })?;
            let internal = image_client_port(container.image().tag())?;
            let port = container.get_host_port_ipv4(internal).await.map_err(|e| {
                HarnessError::NoBackend(format!("Docker backend: no mapped client port: {e}"))
            })?;
            Ok(DockerNode { container, port })
        }

        /// `docker pause|unpause|kill <id>`.
        pub(crate) fn docker(&self, verb: &'static str) -> Result<(), HarnessError> {
            let status = Command::new("docker")
                .args([verb, self.container.id()])
                .status()
                .map_err(HarnessError::io(format!("docker {verb}")))?;
            if status.success() {
                Ok(())
            } else {
                Err(HarnessError::Io {
                    context: format!("docker {verb} {}", self.container.id()),
                    source: std::io::Error::other(format!("exit status {status}")),
                })
            }
        }

        pub(crate) async fn stop(&self) -> Result<(), HarnessError> {
            self.container.stop().await.map_err(|e| HarnessError::Io {
                context: "docker stop".into(),
                source: std::io::Error::other(e.to_string()),
            })
        }
    }
}

/// Starts the Docker backend, or explains why it can't run.
#[cfg(feature = "docker")]
pub(crate) async fn start(config: &crate::ClusterConfig) -> Result<DockerNode, HarnessError> {
    DockerNode::start(config).await
}
