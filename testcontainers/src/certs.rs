//! Throwaway TLS material for a cluster's secure client port, made with the `openssl` command.
//!
//! One call makes, in a directory of the cluster's own:
//! * a CA (`ca.pem`) that signs everything below;
//! * the server's key and certificate, for `127.0.0.1` and `localhost`, in the one PEM file
//!   ZooKeeper's `ssl.keyStore.type=PEM` reads (`server.pem`);
//! * two client identities (`client.pem`/`client.key` and `other-client.pem`/`other-client.key`)
//!   with distinct subjects, for mutual TLS and `x509` ACLs;
//! * a second, unrelated CA (`rogue-ca.pem`) that signed nothing the server shows, for tests
//!   of a client that trusts the wrong authority.
//!
//! RSA 2048 keys and SHA-256 signatures: what both the JDK's and rustls' verifiers accept. The
//! certificates are valid for two days.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::HarnessError;

/// The subject of [`TlsFiles::client_cert`], as ZooKeeper's `x509` auth provider names it.
pub const CLIENT_SUBJECT: &str = "CN=zk-recipes-client,O=zk-testcluster";
/// The subject of [`TlsFiles::other_client_cert`].
pub const OTHER_CLIENT_SUBJECT: &str = "CN=zk-recipes-other-client,O=zk-testcluster";

/// Paths of the PEM files a TLS cluster was started with. See the module docs.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The CA that signed the server and client certificates.
    pub ca: PathBuf,
    /// A CA unrelated to the server's certificate.
    pub rogue_ca: PathBuf,
    /// A client certificate with subject [`CLIENT_SUBJECT`].
    pub client_cert: PathBuf,
    /// The key of [`TlsFiles::client_cert`] (PKCS#8).
    pub client_key: PathBuf,
    /// A second client certificate, subject [`OTHER_CLIENT_SUBJECT`].
    pub other_client_cert: PathBuf,
    /// The key of [`TlsFiles::other_client_cert`].
    pub other_client_key: PathBuf,
    /// The server's key followed by its certificate, for `ssl.keyStore.location`.
    pub(crate) server_store: PathBuf,
}

impl TlsFiles {
    /// Reads a file of this set into a string (PEM is text).
    ///
    /// # Errors
    /// [`HarnessError::Io`] when the file cannot be read.
    pub fn read(path: &Path) -> Result<String, HarnessError> {
        std::fs::read_to_string(path).map_err(HarnessError::io(format!("reading {}", path.display())))
    }

    /// Makes the whole set in `dir` (see the module docs). A TLS cluster calls this for its own
    /// directory; tests that need only the files, not a server, may call it themselves.
    ///
    /// # Errors
    /// [`HarnessError::NoBackend`] when the `openssl` command is missing;
    /// [`HarnessError::Io`] when it fails or a file cannot be written.
    pub fn generate(dir: &Path) -> Result<TlsFiles, HarnessError> {
        std::fs::create_dir_all(dir).map_err(HarnessError::io(format!("creating {}", dir.display())))?;
        let at = |name: &str| dir.join(name);
        self_signed_ca(dir, "ca", "/CN=zk-testcluster CA")?;
        self_signed_ca(dir, "rogue-ca", "/CN=zk-testcluster rogue CA")?;
        signed(
            dir,
            "server",
            "/CN=localhost",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        )?;
        signed(dir, "client", &slashed(CLIENT_SUBJECT), "extendedKeyUsage=clientAuth\n")?;
        signed(dir, "other-client", &slashed(OTHER_CLIENT_SUBJECT), "extendedKeyUsage=clientAuth\n")?;
        let store = [TlsFiles::read(&at("server.key"))?, TlsFiles::read(&at("server.pem"))?].concat();
        std::fs::write(at("server-store.pem"), store)
            .map_err(HarnessError::io("writing the server key store"))?;
        Ok(TlsFiles {
            ca: at("ca.pem"),
            rogue_ca: at("rogue-ca.pem"),
            client_cert: at("client.pem"),
            client_key: at("client.key"),
            other_client_cert: at("other-client.pem"),
            other_client_key: at("other-client.key"),
            server_store: at("server-store.pem"),
        })
    }
}

/// `CN=a,O=b` (how the JDK prints a subject) as `openssl -subj` wants it: `/O=b/CN=a`.
fn slashed(subject: &str) -> String {
    subject.split(',').rev().map(|part| format!("/{part}")).collect()
}

fn self_signed_ca(dir: &Path, name: &str, subject: &str) -> Result<(), HarnessError> {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-sha256",
            "-days",
            "2",
            "-subj",
            subject,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
        ],
    )
}

/// A key and a certificate signed by `ca`, with the given extensions.
fn signed(dir: &Path, name: &str, subject: &str, extensions: &str) -> Result<(), HarnessError> {
    let ext = format!("{name}.ext");
    let all = format!("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n{extensions}");
    std::fs::write(dir.join(&ext), all).map_err(HarnessError::io("writing certificate extensions"))?;
    let (key, csr, pem) = (format!("{name}.key"), format!("{name}.csr"), format!("{name}.pem"));
    openssl(dir, &["req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", &key, "-out", &csr])?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-sha256",
            "-days",
            "2",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-extfile",
            &ext,
            "-out",
            &pem,
        ],
    )
}

fn openssl(dir: &Path, args: &[&str]) -> Result<(), HarnessError> {
    let out = Command::new("openssl").args(args).current_dir(dir).stdin(Stdio::null()).output().map_err(
        |e| match e.kind() {
            std::io::ErrorKind::NotFound => HarnessError::NoBackend(
                "TLS mode needs the `openssl` command: apt-get install -y openssl \
                 (scripts/ensure-zookeeper does)"
                    .into(),
            ),
            _ => HarnessError::Io { context: "running openssl".into(), source: e },
        },
    )?;
    if out.status.success() {
        Ok(())
    } else {
        Err(HarnessError::Io {
            context: format!("openssl {}: {}", args[0], String::from_utf8_lossy(&out.stderr).trim()),
            source: std::io::Error::other(out.status.to_string()),
        })
    }
}
