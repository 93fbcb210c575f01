//! [`ZkVersion`]: which ZooKeeper release a server runs, and where its jars live.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::HarnessError;

/// A ZooKeeper release, `major.minor.patch` (`3.9.3`).
///
/// Chosen per cluster by [`crate::ClusterConfig::version`] (and per node by
/// [`crate::ClusterConfig::node_versions`] or [`crate::ZkCluster::restart_as`]); for a whole run
/// by the `ZK_VERSION` environment variable ([`ZkVersion::from_env`]), whose default is
/// [`ZkVersion::DEFAULT`]. `scripts/ensure-zookeeper-versions` fetches the versions the project
/// knows a registry for into `${CARGO_TARGET_DIR:-target}/zookeeper/<version>/lib/`; 3.8.0 is
/// Debian 12's system package (`/usr/share/java/zookeeper.jar`). After a start the harness checks
/// that every server reports the version asked for in `srvr` ([`HarnessError::WrongVersion`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ZkVersion {
    major: u16,
    minor: u16,
    patch: u16,
}

impl ZkVersion {
    /// 3.6.3, the oldest release the project tests (from PyPI's `pyspark` 3.5.3 sources).
    pub const V3_6_3: ZkVersion = ZkVersion::new(3, 6, 3);
    /// 3.8.0, Debian 12's `zookeeper` package.
    pub const V3_8_0: ZkVersion = ZkVersion::new(3, 8, 0);
    /// 3.9.3, Debian 13's `libzookeeper-java`: the default.
    pub const V3_9_3: ZkVersion = ZkVersion::new(3, 9, 3);
    /// 3.9.6, Debian unstable's `libzookeeper-java` when this was written.
    pub const V3_9_6: ZkVersion = ZkVersion::new(3, 9, 6);
    /// The version a cluster runs when `ZK_VERSION` is unset: 3.9.3, a stable release of the
    /// current line (what a new deployment gets).
    pub const DEFAULT: ZkVersion = ZkVersion::V3_9_3;

    /// The release `major.minor.patch`.
    pub const fn new(major: u16, minor: u16, patch: u16) -> ZkVersion {
        ZkVersion { major, minor, patch }
    }

    /// `(major, minor, patch)`.
    pub fn parts(self) -> (u16, u16, u16) {
        (self.major, self.minor, self.patch)
    }

    /// The version `ZK_VERSION` names, or [`ZkVersion::DEFAULT`] when it is unset or empty.
    ///
    /// # Errors
    /// [`HarnessError::BadVersion`] when `ZK_VERSION` is not a version such as `3.9.3`.
    pub fn from_env() -> Result<ZkVersion, HarnessError> {
        match std::env::var("ZK_VERSION") {
            Ok(v) if !v.trim().is_empty() => v.parse(),
            _ => Ok(ZkVersion::DEFAULT),
        }
    }

    /// The version a server reports on the first line of `srvr`
    /// (`Zookeeper version: 3.9.3-<commit>, built on ...`), or `None` when there is no such line.
    pub fn from_srvr(srvr: &str) -> Option<ZkVersion> {
        let line = srvr.lines().find_map(|l| l.strip_prefix("Zookeeper version:"))?.trim();
        let release: String = line.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
        release.trim_end_matches('.').parse().ok()
    }

    /// The directory `scripts/ensure-zookeeper-versions` unpacks this version into
    /// (`<target>/zookeeper/<version>`, holding `lib/`): `$CARGO_TARGET_DIR` when set, else the
    /// first `target/` above the running executable that holds a `zookeeper/` folder, else this
    /// workspace's `target/`.
    pub fn install_dir(self) -> PathBuf {
        versions_root().join(self.to_string())
    }
}

impl fmt::Display for ZkVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl FromStr for ZkVersion {
    type Err = HarnessError;

    /// Parses `3.9.3`: three dot-separated numbers, nothing else.
    fn from_str(s: &str) -> Result<ZkVersion, HarnessError> {
        let bad = || HarnessError::BadVersion(s.to_string());
        let mut parts = s.trim().split('.').map(|p| {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            p.parse::<u16>().map_err(|_| bad())
        });
        let mut next = || parts.next().unwrap_or_else(|| Err(bad()));
        let version = ZkVersion::new(next()?, next()?, next()?);
        match parts.next() {
            None => Ok(version),
            Some(_) => Err(bad()),
        }
    }
}

/// Where `scripts/ensure-zookeeper-versions` puts its versions: `<target>/zookeeper`.
fn versions_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("zookeeper");
    }
    // A test, example or bench binary runs from target/<profile>/{deps,examples,}/.
    let exe = std::env::current_exe().ok();
    let found = exe
        .as_deref()
        .and_then(|exe| exe.ancestors().skip(1).map(|d| d.join("zookeeper")).find(|d| d.is_dir()));
    found.unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/zookeeper"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_three_numbers_only() {
        assert_eq!("3.9.3".parse::<ZkVersion>().unwrap(), ZkVersion::V3_9_3);
        assert_eq!(" 3.10.12 ".parse::<ZkVersion>().unwrap(), ZkVersion::new(3, 10, 12));
        for bad in ["", "3.9", "3.9.3.1", "3.9.x", "v3.9.3", "3..3", "3.9.-1", "sid", "3.9.99999"] {
            assert!(
                matches!(bad.parse::<ZkVersion>(), Err(HarnessError::BadVersion(s)) if s == bad),
                "{bad:?} parsed"
            );
        }
    }

    #[test]
    fn reads_the_version_srvr_reports() {
        let srvr = "Zookeeper version: 3.9.3-c26634f34490bb0ea7a09cc51e05ede3b4e320ee, built on \
                    2024-10-17 23:21 UTC\nLatency min/avg/max: 0/0.0/0\nMode: standalone\n";
        assert_eq!(ZkVersion::from_srvr(srvr), Some(ZkVersion::V3_9_3));
        assert_eq!(
            ZkVersion::from_srvr("Zookeeper version: 3.8.0-1, built on ...\n"),
            Some(ZkVersion::V3_8_0)
        );
        assert_eq!(ZkVersion::from_srvr("Mode: standalone\n"), None);
    }

    #[test]
    fn orders_by_release() {
        assert!(ZkVersion::V3_6_3 < ZkVersion::V3_8_0);
        assert!(ZkVersion::V3_9_3 < ZkVersion::new(3, 10, 0));
        assert_eq!(ZkVersion::V3_9_6.to_string(), "3.9.6");
    }
}
