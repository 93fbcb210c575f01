//! [`SaslMode`]: servers that authenticate their clients with SASL and refuse the others.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::HarnessError;

#[cfg(doc)]
use crate::{ClusterConfig, Kdc};

/// Whether the servers authenticate clients with SASL ([`ClusterConfig::sasl`], local backend).
///
/// Every mode but `Off` writes a JAAS file with a `Server` section into the cluster's temporary
/// directory, points the servers at it (`-Djava.security.auth.login.config`), turns on
/// ZooKeeper's SASL provider (`authProvider.sasl`) and makes the servers refuse clients that did
/// not authenticate with SASL: `enforce.auth.enabled=true` with `enforce.auth.schemes=sasl`
/// (3.8+) and `zookeeper.sessionRequireClientSASLAuth=true` (3.6+; each version ignores the
/// keys it does not know).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SaslMode {
    /// No SASL: clients connect unauthenticated.
    #[default]
    Off,
    /// DIGEST-MD5 with these users and passwords (`user_<name>="<password>"` in the JAAS
    /// `Server` section). The server knows a client as `sasl:<name>`.
    DigestMd5 {
        /// `(user, password)` pairs.
        users: Vec<(String, String)>,
    },
    /// Kerberos (GSSAPI) with a service principal and its keytab from a KDC (see
    /// [`Kdc::zookeeper_service`]). The server knows a client by its principal, `sasl:<name>@<REALM>`.
    Kerberos {
        /// The servers' principal, e.g. `zookeeper/127.0.0.1@ZK-RECIPES.TEST`.
        principal: String,
        /// A keytab holding its keys.
        keytab: PathBuf,
        /// The `krb5.conf` that names the realm's KDC (`-Djava.security.krb5.conf`).
        krb5_conf: PathBuf,
    },
}

/// `key=value` pairs.
type Pairs = Vec<(String, String)>;

/// The `zoo.cfg` lines and Java system properties that turn `mode` on, with the JAAS file
/// written into `dir`.
pub(crate) fn settings(mode: &SaslMode, dir: &Path) -> Result<(Pairs, Pairs), HarnessError> {
    let mut properties = Vec::new();
    let section = match mode {
        SaslMode::Off => return Ok((Vec::new(), Vec::new())),
        SaslMode::DigestMd5 { users } => {
            let mut s = String::from("  org.apache.zookeeper.server.auth.DigestLoginModule required");
            for (user, password) in users {
                let _ = write!(s, "\n  user_{user}=\"{}\"", password.replace('"', "\\\""));
            }
            s
        }
        SaslMode::Kerberos { principal, keytab, krb5_conf } => {
            properties.push(("java.security.krb5.conf".to_string(), krb5_conf.display().to_string()));
            properties.push(("sun.security.krb5.disableReferrals".to_string(), "true".to_string()));
            format!(
                "  com.sun.security.auth.module.Krb5LoginModule required\n  useKeyTab=true\n  \
                 keyTab=\"{}\"\n  storeKey=true\n  useTicketCache=false\n  isInitiator=false\n  \
                 principal=\"{principal}\"",
                keytab.display()
            )
        }
    };
    let jaas = dir.join("jaas.conf");
    std::fs::write(&jaas, format!("Server {{\n{section};\n}};\n"))
        .map_err(HarnessError::io(format!("writing {}", jaas.display())))?;
    properties.push(("java.security.auth.login.config".to_string(), jaas.display().to_string()));
    properties.push(("zookeeper.sessionRequireClientSASLAuth".to_string(), "true".to_string()));
    properties.push(("zookeeper.allowSaslFailedClients".to_string(), "false".to_string()));
    let cfg = [
        ("authProvider.sasl", "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"),
        ("enforce.auth.enabled", "true"),
        ("enforce.auth.schemes", "sasl"),
    ];
    Ok((cfg.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), properties))
}
