//! [`Kdc`]: a throwaway MIT Kerberos realm and KDC on a free loopback port.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::ports::free_ports;
use crate::resource::{self, ServerProcess, START_ATTEMPTS};
use crate::{HarnessError, SaslMode};

const RESOURCE: &str = "Kerberos KDC";

/// What to tell a person when MIT Kerberos' KDC is missing.
const INSTALL_HINT: &str = "run scripts/ensure-kerberos (Debian/Ubuntu: sudo apt-get install -y \
    krb5-kdc krb5-admin-server krb5-user)";

/// The realm every [`Kdc`] serves.
pub const REALM: &str = "ZK-RECIPES.TEST";

/// The principal the harness makes to see that the KDC answers (`kinit` with its keytab).
const PROBE: &str = "zk-testcluster-probe";

/// Settings for a [`Kdc`].
#[derive(Clone, Debug)]
pub struct KdcConfig {
    /// The longest life of a ticket (`max_life` of the realm and of every principal made).
    pub max_life: Duration,
    /// How long to wait for the KDC to issue a first ticket.
    pub ready_timeout: Duration,
}

impl Default for KdcConfig {
    fn default() -> Self {
        KdcConfig { max_life: Duration::from_secs(3600), ready_timeout: Duration::from_secs(30) }
    }
}

/// A running MIT Kerberos KDC (`krb5kdc`) for the realm [`REALM`], with its database, `kdc.conf`
/// and `krb5.conf` in a temporary directory of its own (the machine's `/etc/krb5.conf` is never
/// read: every command runs with `KRB5_CONFIG` and `KRB5_KDC_PROFILE` pointing there), listening
/// on `127.0.0.1` at a free port, UDP and TCP.
///
/// Principals and their keytabs are made with `kadmin.local` ([`Kdc::principal`]). Ready once
/// `kinit` with a probe principal's keytab gets a ticket. [`Kdc::stop`] and drop (also while a
/// test panics) stop it by PID (SIGTERM, SIGKILL after 10 s) and remove the directory.
///
/// The `krb5.conf` turns host name canonicalisation off (`dns_canonicalize_hostname = false`,
/// `rdns = false`): a client asks for `service/<host>` exactly as the host is written, so a
/// server reached at `127.0.0.1` has the principal `zookeeper/127.0.0.1@ZK-RECIPES.TEST`.
#[derive(Debug)]
pub struct Kdc {
    process: ServerProcess,
    port: u16,
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
}

impl Kdc {
    /// Starts a KDC with [`KdcConfig::default`].
    ///
    /// # Errors
    /// [`HarnessError::NoBackend`] when `krb5kdc`, `kdb5_util` or `kadmin.local` is missing;
    /// [`HarnessError::ResourceNotReady`] when it issues no ticket in time.
    pub async fn start() -> Result<Kdc, HarnessError> {
        Self::start_with(KdcConfig::default()).await
    }

    /// Starts a KDC with explicit settings.
    ///
    /// # Errors
    /// As [`Kdc::start`].
    pub async fn start_with(config: KdcConfig) -> Result<Kdc, HarnessError> {
        let sbin = |name: &str| tool(name);
        let (krb5kdc, kdb5_util) = (sbin("krb5kdc")?, sbin("kdb5_util")?);
        sbin("kadmin.local")?;
        let dir = resource::temp_dir("kdc")?;
        let path = dir.path().to_path_buf();
        let log = path.join("krb5kdc.log");
        let mut last_err = None;
        for attempt in 1..=START_ATTEMPTS {
            let port = free_ports(1)?[0];
            let _ = std::fs::remove_file(path.join("principal"));
            write_config(&path, port, config.max_life)?;
            run(Command::new(&kdb5_util).args(["create", "-s", "-r", REALM, "-P", "zk-testcluster"]), &path)?;
            let probe = make_principal(&path, PROBE)?;
            let mut cmd = Command::new(&krb5kdc);
            cmd.args(["-n", "-r", REALM]).envs(env(&path));
            let process = ServerProcess::spawn(RESOURCE, cmd, &log, libc::SIGTERM)?;
            let mut kdc = Kdc { process, port, dir: None, path: path.clone() };
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            let ready = || kinit(&path, &probe, PROBE);
            match resource::wait_ready(RESOURCE, addr, &mut kdc.process, &log, config.ready_timeout, ready)
                .await
            {
                Ok(()) => {
                    tracing::debug!(pid = kdc.process.pid(), port, "started the KDC");
                    kdc.dir = Some(dir);
                    return Ok(kdc);
                }
                Err(e) => {
                    tracing::warn!(attempt, error = %e, "KDC start failed; retrying with a fresh port");
                    kdc.process.stop();
                    last_err = Some(e);
                }
            }
        }
        let err = last_err.expect("at least one attempt");
        resource::release_dir(Some(dir), RESOURCE);
        Err(err)
    }

    /// Makes the principal `name` (`name@REALM`, e.g. `alice` or `zookeeper/127.0.0.1`) with a
    /// random key, and writes its keys to a keytab of its own in the KDC's directory.
    /// Returns the keytab's path. Idempotent for a name already made.
    ///
    /// # Errors
    /// [`HarnessError::Io`] when `kadmin.local` fails.
    pub fn principal(&self, name: &str) -> Result<PathBuf, HarnessError> {
        make_principal(&self.path, name)
    }

    /// Deletes the principal `name` from the KDC's database; its keytab stays (a keytab of a
    /// principal the KDC no longer knows, for tests of refusals).
    ///
    /// # Errors
    /// [`HarnessError::Io`] when `kadmin.local` fails.
    pub fn delete_principal(&self, name: &str) -> Result<(), HarnessError> {
        let kadmin = tool("kadmin.local")?;
        run(Command::new(&kadmin).args(["-r", REALM, "-q", &format!("delprinc -force {name}")]), &self.path)
    }

    /// A [`SaslMode::Kerberos`] for servers reached at `host` (as clients write it in their
    /// connect strings): the principal `zookeeper/<host>@REALM` is made, with its keytab.
    ///
    /// # Errors
    /// As [`Kdc::principal`].
    pub fn zookeeper_service(&self, host: &str) -> Result<SaslMode, HarnessError> {
        let name = format!("zookeeper/{host}");
        let keytab = self.principal(&name)?;
        Ok(SaslMode::Kerberos { principal: format!("{name}@{REALM}"), keytab, krb5_conf: self.krb5_conf() })
    }

    /// The environment a Kerberos client of this realm runs with, authenticating as the keys
    /// in `keytab`: `KRB5_CONFIG` (this KDC's `krb5.conf`), `KRB5_CLIENT_KTNAME` (the keytab,
    /// from which MIT Kerberos gets and renews tickets by itself) and `KRB5CCNAME` (a fresh
    /// in-memory credential cache named `cache`).
    pub fn client_env(&self, keytab: &Path, cache: &str) -> Vec<(String, String)> {
        vec![
            ("KRB5_CONFIG".into(), self.krb5_conf().display().to_string()),
            ("KRB5_CLIENT_KTNAME".into(), keytab.display().to_string()),
            ("KRB5CCNAME".into(), format!("MEMORY:{cache}")),
        ]
    }

    /// The realm's `krb5.conf`, for clients (`KRB5_CONFIG`) and Java (`java.security.krb5.conf`).
    pub fn krb5_conf(&self) -> PathBuf {
        self.path.join("krb5.conf")
    }

    /// The realm's name, [`REALM`].
    pub fn realm(&self) -> &'static str {
        REALM
    }

    /// The KDC's port on `127.0.0.1` (UDP and TCP).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The KDC's process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Stops the KDC by PID and removes its directory. Idempotent.
    pub fn stop(&mut self) {
        self.process.stop();
        resource::release_dir(self.dir.take(), RESOURCE);
    }
}

impl Drop for Kdc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Makes `name@REALM` in the database in `dir` and its keytab there (see [`Kdc::principal`]).
fn make_principal(dir: &Path, name: &str) -> Result<PathBuf, HarnessError> {
    let keytab = dir.join(format!("{}.keytab", name.replace(['/', '@'], "_")));
    if keytab.exists() {
        return Ok(keytab);
    }
    let kadmin = tool("kadmin.local")?;
    run(Command::new(&kadmin).args(["-r", REALM, "-q", &format!("addprinc -randkey {name}")]), dir)?;
    let ktadd = format!("ktadd -k {} {name}", keytab.display());
    run(Command::new(&kadmin).args(["-r", REALM, "-q", &ktadd]), dir)?;
    Ok(keytab)
}

/// `KRB5_CONFIG` and `KRB5_KDC_PROFILE` for the realm in `dir`.
fn env(dir: &Path) -> [(String, String); 2] {
    [
        ("KRB5_CONFIG".into(), dir.join("krb5.conf").display().to_string()),
        ("KRB5_KDC_PROFILE".into(), dir.join("kdc.conf").display().to_string()),
    ]
}

/// Writes `kdc.conf` and `krb5.conf` for a KDC on `127.0.0.1:port`.
fn write_config(dir: &Path, port: u16, max_life: Duration) -> Result<(), HarnessError> {
    let d = dir.display();
    let life = max_life.as_secs().max(1);
    let kdc_conf = format!(
        "[kdcdefaults]\n kdc_listen = 127.0.0.1:{port}\n kdc_tcp_listen = 127.0.0.1:{port}\n\n\
         [realms]\n {REALM} = {{\n  database_name = {d}/principal\n  key_stash_file = {d}/stash\n  \
         acl_file = {d}/kadm5.acl\n  max_life = {life}s\n  max_renewable_life = 0\n  \
         supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal\n }}\n\n\
         [logging]\n kdc = FILE:{d}/kdc-events.log\n"
    );
    let krb5_conf = format!(
        "[libdefaults]\n default_realm = {REALM}\n dns_lookup_realm = false\n dns_lookup_kdc = false\n \
         rdns = false\n dns_canonicalize_hostname = false\n ticket_lifetime = {life}s\n \
         forwardable = false\n\n\
         [realms]\n {REALM} = {{\n  kdc = 127.0.0.1:{port}\n  kdc = tcp/127.0.0.1:{port}\n }}\n\n\
         [domain_realm]\n localhost = {REALM}\n 127.0.0.1 = {REALM}\n"
    );
    for (name, text) in [("kdc.conf", kdc_conf), ("krb5.conf", krb5_conf), ("kadm5.acl", String::new())] {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(HarnessError::io(format!("writing {}", path.display())))?;
    }
    Ok(())
}

/// Runs a Kerberos admin command with the realm's environment; its output in the error.
fn run(cmd: &mut Command, dir: &Path) -> Result<(), HarnessError> {
    let shown = format!("{cmd:?}");
    let out = cmd.envs(env(dir)).output().map_err(HarnessError::io(format!("running {shown}")))?;
    if out.status.success() {
        return Ok(());
    }
    Err(HarnessError::Io {
        context: format!("running {shown}"),
        source: std::io::Error::other(format!(
            "{}: {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )),
    })
}

/// Whether `kinit` gets a ticket for `principal` with `keytab` (into a throwaway memory cache).
async fn kinit(dir: &Path, keytab: &Path, principal: &str) -> bool {
    let mut cmd = tokio::process::Command::new("kinit");
    cmd.arg("-k").arg("-t").arg(keytab).arg(principal).envs(env(dir));
    cmd.env("KRB5CCNAME", "MEMORY:probe")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    matches!(tokio::time::timeout(Duration::from_secs(5), cmd.status()).await, Ok(Ok(s)) if s.success())
}

/// The path of a Kerberos tool: on `PATH`, or in `/usr/sbin`.
fn tool(name: &str) -> Result<PathBuf, HarnessError> {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join(name)).collect::<Vec<_>>())
        .unwrap_or_default();
    resource::first_existing(on_path.into_iter().chain([Path::new("/usr/sbin").join(name)]))
        .ok_or_else(|| HarnessError::NoBackend(format!("no `{name}` found; {INSTALL_HINT}")))
}
