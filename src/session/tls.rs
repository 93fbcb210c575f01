//! TLS to ZooKeeper's secure client port (cargo feature `tls`, off by default).
//!
//! [`TlsConfig`] holds what the client trusts (a CA bundle) and, for mutual TLS, who it is (a
//! certificate and its key), all in PEM. [`crate::ConnectOptions::tls`] puts it to use: every
//! server in the connect string is then reached over TLS (a `tcp://` prefix keeps one in
//! plaintext), and its certificate must name the host or IP address written in the connect
//! string.

use std::path::Path;

use zookeeper_client::TlsOptions;

use crate::error::{Error, Result};

/// Trust and identity for TLS connections, parsed and checked when built.
///
/// ```no_run
/// # fn main() -> zk_recipes::Result<()> {
/// use std::time::Duration;
/// use zk_recipes::{ConnectOptions, TlsConfig};
///
/// let tls = TlsConfig::from_ca_file("/etc/zk/ca.pem")?
///     .with_identity_files("/etc/zk/client.pem", "/etc/zk/client.key")?; // mutual TLS only
/// let options = ConnectOptions::new(Duration::from_secs(10)).tls(tls);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TlsConfig {
    options: TlsOptions,
    /// Where the CA came from, for `Debug`.
    ca_from: String,
    /// Where the client certificate came from, for `Debug`; the key is never shown.
    identity_from: Option<String>,
}

impl std::fmt::Debug for TlsConfig {
    /// Shows where trust and identity came from; key material never reaches logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("ca", &self.ca_from)
            .field("identity", &self.identity_from.as_ref().map(|from| format!("{from} (key redacted)")))
            .finish()
    }
}

impl TlsConfig {
    /// Trusts the CA certificates (and CRLs) in `ca_pem`.
    ///
    /// # Errors
    /// [`Error::Tls`] when the PEM holds no usable certificate.
    pub fn from_ca_pem(ca_pem: &str) -> Result<TlsConfig> {
        Self::trusting(ca_pem, "PEM given in code".to_string())
    }

    /// Trusts the CA certificates (and CRLs) in the PEM file at `path`.
    ///
    /// # Errors
    /// [`Error::Tls`] when the file cannot be read or holds no usable certificate.
    pub fn from_ca_file(path: impl AsRef<Path>) -> Result<TlsConfig> {
        let path = path.as_ref();
        Self::trusting(&read(path, "CA file")?, path.display().to_string())
    }

    /// Presents `cert_pem` (a certificate chain) with its private key `key_pem` (PKCS#8, PKCS#1
    /// or SEC1) to servers that ask for a client certificate (`ssl.clientAuth=need` or `want`).
    ///
    /// # Errors
    /// [`Error::Tls`] when either PEM holds nothing usable.
    pub fn with_identity_pem(self, cert_pem: &str, key_pem: &str) -> Result<TlsConfig> {
        self.identified(cert_pem, key_pem, "PEM given in code".to_string())
    }

    /// As [`TlsConfig::with_identity_pem`], reading both from files.
    ///
    /// # Errors
    /// [`Error::Tls`] when a file cannot be read or holds nothing usable.
    pub fn with_identity_files(self, cert: impl AsRef<Path>, key: impl AsRef<Path>) -> Result<TlsConfig> {
        let (cert, key) = (cert.as_ref(), key.as_ref());
        let from = cert.display().to_string();
        self.identified(&read(cert, "certificate file")?, &read(key, "key file")?, from)
    }

    fn trusting(ca_pem: &str, ca_from: String) -> Result<TlsConfig> {
        let options = TlsOptions::new()
            .with_pem_ca(ca_pem)
            .map_err(|e| Error::Tls { reason: format!("CA from {ca_from}: {e}") })?;
        Ok(TlsConfig { options, ca_from, identity_from: None })
    }

    fn identified(mut self, cert_pem: &str, key_pem: &str, from: String) -> Result<TlsConfig> {
        if !cert_pem.contains("-----BEGIN CERTIFICATE-----") {
            return Err(Error::Tls {
                reason: format!("client certificate from {from}: no certificate in it"),
            });
        }
        self.options = self
            .options
            .with_pem_identity(cert_pem, key_pem)
            .map_err(|e| Error::Tls { reason: format!("client identity from {from}: {e}") })?;
        self.identity_from = Some(from);
        Ok(self)
    }

    /// The client crate's options, with a crypto provider in place.
    pub(crate) fn client_options(&self) -> TlsOptions {
        install_crypto_provider();
        self.options.clone()
    }
}

fn read(path: &Path, what: &str) -> Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| Error::Tls { reason: format!("{what} {}: {e}", path.display()) })
}

/// Makes rustls' process-wide default provider aws-lc-rs when none is set. rustls picks one by
/// itself only when exactly one provider is compiled in; a build that also links `ring` (through
/// another crate) would otherwise panic on the first TLS connection.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: some provider is then in place.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    }
}

/// Checks that every server to be reached over TLS has a name a certificate can be checked
/// against. The client crate would panic on such a name in its connection task.
pub(crate) fn check_server_names(servers: &str) -> Result<()> {
    for server in servers.split(',') {
        if server.starts_with("tcp://") {
            continue;
        }
        let address = server.strip_prefix("tcp+tls://").unwrap_or(server);
        let host = match address.strip_prefix('[') {
            Some(bracketed) => bracketed.split(']').next().unwrap_or(bracketed),
            None => address.rsplit_once(':').map_or(address, |(host, _)| host),
        };
        if rustls_pki_types::ServerName::try_from(host).is_err() {
            return Err(Error::Tls {
                reason: format!(
                    "{host:?} (in {server:?}) is not a DNS name or IP address a certificate can name"
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_are_checked_before_connecting() {
        assert!(check_server_names("127.0.0.1:2281,localhost:2282,[::1]:2283,zk-1.example.com").is_ok());
        assert!(check_server_names("tcp://not_a_dns_name:1,127.0.0.1:2").is_ok(), "plaintext is not checked");
        let err = check_server_names("127.0.0.1:1,bad_name!:2").unwrap_err();
        assert!(matches!(err, Error::Tls { ref reason } if reason.contains("bad_name!")), "{err}");
    }

    #[test]
    fn unusable_pem_is_a_typed_error_naming_its_file() {
        assert!(matches!(TlsConfig::from_ca_pem("not a pem"), Err(Error::Tls { .. })));
        let missing = TlsConfig::from_ca_file("/nonexistent/ca.pem").unwrap_err();
        assert!(missing.to_string().contains("/nonexistent/ca.pem"), "{missing}");
    }
}
