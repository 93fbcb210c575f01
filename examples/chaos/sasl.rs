//! `--sasl digest|gssapi` (issue 48): the round on an ensemble that requires SASL.
//!
//! The servers then refuse every client that did not authenticate with SASL (the harness's
//! `SaslMode`); every session of the run, the workers', the orchestrator's and the convergence
//! check's, authenticates as the one user `chaos` (DIGEST-MD5, or the Kerberos principal
//! `chaos@ZK-RECIPES.TEST` from a throw-away KDC the run starts), through [`options`], and every
//! recipe builds its nodes creator-only ([`lock`], [`latch`], [`selector`]). While each phase
//! runs, [`sample`] reads the ACL of the recipes' nodes again and again: every node must carry
//! exactly the run's identity, also those of sessions re-created after an expiry (their
//! ephemeral owners are counted); a node with another ACL, or a phase in which no worker node
//! was seen, is a violation. `--sasl digest:PASSWORD` makes the clients use another password
//! than the servers know: the run must then stop at its first session with a typed
//! `AuthFailed`.
//!
//! The mechanism reaches the worker processes in the environment ([`ENV`]), as Kerberos'
//! settings do (`KRB5_CONFIG`, `KRB5_CLIENT_KTNAME`, an in-memory `KRB5CCNAME`: each process
//! gets its tickets from the keytab by itself).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use zk_recipes::zookeeper_client::{Acl, Acls, Client, Permission};
use zk_recipes::{ConnectOptions, LatchOptions, LockOptions, SelectorOptions, Session};
use zk_testcluster::SaslMode;

use crate::Error;

/// The mechanism, for this process and the worker processes it starts.
const ENV: &str = "ZK_CHAOS_SASL";
/// The one user every session of the run authenticates as.
#[cfg_attr(not(any(feature = "sasl-digest-md5", feature = "sasl-gssapi")), allow(dead_code))]
pub const USER: &str = "chaos";
/// Its password, as the servers' JAAS file has it.
#[cfg_attr(not(feature = "sasl-digest-md5"), allow(dead_code))]
const PASSWORD: &str = "chaos-secret";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sasl {
    Off,
    /// DIGEST-MD5 as [`USER`], with this password (the servers know [`PASSWORD`]).
    #[cfg(feature = "sasl-digest-md5")]
    Digest {
        password: String,
    },
    /// GSSAPI as the principal `USER@REALM`.
    #[cfg(feature = "sasl-gssapi")]
    Gssapi,
}

fn parse(value: &str) -> Result<Sasl, String> {
    #[allow(unused_variables)] // without `sasl-digest-md5` and `sasl-gssapi`
    let (mechanism, password) = value.split_once(':').unwrap_or((value, ""));
    match mechanism {
        "" | "off" => Ok(Sasl::Off),
        #[cfg(feature = "sasl-digest-md5")]
        "digest" => {
            let password = if password.is_empty() { PASSWORD } else { password };
            Ok(Sasl::Digest { password: password.to_string() })
        }
        #[cfg(not(feature = "sasl-digest-md5"))]
        "digest" => Err("--sasl digest needs --features zk-recipes/sasl-digest-md5".into()),
        #[cfg(feature = "sasl-gssapi")]
        "gssapi" if password.is_empty() => Ok(Sasl::Gssapi),
        #[cfg(not(feature = "sasl-gssapi"))]
        "gssapi" => Err("--sasl gssapi needs --features zk-recipes/sasl-gssapi".into()),
        _ => Err(format!("--sasl takes digest, digest:PASSWORD or gssapi, not {value}")),
    }
}

/// This process's mechanism (from [`ENV`], which [`setup`] sets).
pub fn get() -> &'static Sasl {
    static SASL: OnceLock<Sasl> = OnceLock::new();
    SASL.get_or_init(|| parse(&std::env::var(ENV).unwrap_or_default()).unwrap_or(Sasl::Off))
}

/// The servers' side of `--sasl`, and the KDC it needs (stopped by PID when dropped).
pub struct Setup {
    pub mode: SaslMode,
    #[cfg(feature = "sasl-gssapi")]
    _kdc: Option<zk_testcluster::Kdc>,
}

/// Reads `--sasl VALUE` and prepares it: the environment the sessions of this process and of
/// the worker processes read, and for GSSAPI a KDC with the principals. Call before any thread
/// is started (it sets environment variables).
///
/// # Errors
/// A value that is not a mechanism, or one this build has not the feature for; the KDC's start.
pub fn setup(value: Option<&str>) -> Result<Setup, Error> {
    let sasl = parse(value.unwrap_or(""))?;
    std::env::set_var(ENV, value.unwrap_or(""));
    let mode = match &sasl {
        Sasl::Off => SaslMode::Off,
        #[cfg(feature = "sasl-digest-md5")]
        Sasl::Digest { .. } => SaslMode::DigestMd5 { users: vec![(USER.into(), PASSWORD.into())] },
        #[cfg(feature = "sasl-gssapi")]
        Sasl::Gssapi => {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let kdc = rt.block_on(zk_testcluster::Kdc::start())?;
            let keytab = kdc.principal(USER)?;
            for (key, value) in kdc.client_env(&keytab, "chaos") {
                std::env::set_var(key, value);
            }
            // The proxies and the servers are all reached at 127.0.0.1.
            let mode = kdc.zookeeper_service("127.0.0.1")?;
            return Ok(Setup { mode, _kdc: Some(kdc) });
        }
    };
    Ok(Setup {
        mode,
        #[cfg(feature = "sasl-gssapi")]
        _kdc: None,
    })
}

/// The identity the servers know the run's sessions by (`scheme:id`), `None` without SASL.
pub fn identity() -> Option<String> {
    match get() {
        Sasl::Off => None,
        #[cfg(feature = "sasl-digest-md5")]
        Sasl::Digest { .. } => Some(format!("sasl:{USER}")),
        #[cfg(feature = "sasl-gssapi")]
        Sasl::Gssapi => Some(format!("sasl:{USER}@{}", zk_testcluster::KERBEROS_REALM)),
    }
}

/// Every session's options: the session timeout, and the run's SASL.
pub fn options(timeout: Duration) -> ConnectOptions {
    let options = ConnectOptions::new(timeout);
    match get() {
        Sasl::Off => options,
        #[cfg(feature = "sasl-digest-md5")]
        Sasl::Digest { password } => {
            options.sasl(zk_recipes::SaslConfig::digest_md5(USER, password.as_str()))
        }
        #[cfg(feature = "sasl-gssapi")]
        Sasl::Gssapi => options.sasl(zk_recipes::SaslConfig::gssapi()),
    }
}

/// A session to `connect` with [`options`].
///
/// # Errors
/// As `Session::connect_with`: `AuthFailed` for refused credentials.
pub async fn connect(connect: &str, timeout: Duration) -> zk_recipes::Result<Session> {
    Session::connect_with(connect, &options(timeout)).await
}

/// Connects one session as every session of the run does, and asks the servers who it is
/// (`whoami`): it must be the run's identity. Returns what to print; `None` without SASL.
///
/// # Errors
/// The session's (`AuthFailed` for credentials the servers refuse); another identity.
pub async fn first_session(connect: &str) -> Result<Option<String>, Error> {
    let Some(expected) = identity() else { return Ok(None) };
    let session = self::connect(connect, Duration::from_secs(10)).await?;
    let users = session.whoami().await;
    session.close().await;
    let shown = match users {
        Ok(users) => {
            let ids: Vec<String> = users.iter().map(|u| format!("{}:{}", u.scheme(), u.user())).collect();
            if !ids.contains(&expected) {
                return Err(format!("a SASL session is {ids:?} to the servers, not {expected}").into());
            }
            format!("whoami {}", ids.join(", "))
        }
        // 3.6 has no `whoami`: the ACL checks of every phase show the identity.
        Err(zk_recipes::Error::ServerTooOld { .. }) => "no whoami on this server".to_string(),
        Err(e) => return Err(e.into()),
    };
    Ok(Some(format!(
        "sasl: the sessions authenticate as {expected} ({shown}); every recipe node creator-only"
    )))
}

/// The ACL of the nodes the run creates itself: creator-only under SASL, open without.
pub fn node_acls() -> Acls<'static> {
    match get() {
        Sasl::Off => Acls::anyone_all(),
        #[allow(unreachable_patterns)] // without a SASL feature, `Off` is the only one
        _ => Acls::creator_all(),
    }
}

pub fn lock(options: LockOptions) -> LockOptions {
    if identity().is_some() {
        options.acls(Acls::creator_all())
    } else {
        options
    }
}

pub fn latch(options: LatchOptions) -> LatchOptions {
    if identity().is_some() {
        options.acls(Acls::creator_all())
    } else {
        options
    }
}

pub fn selector(options: SelectorOptions) -> SelectorOptions {
    if identity().is_some() {
        options.acls(Acls::creator_all())
    } else {
        options
    }
}

/// What [`sample`] saw in one phase.
#[derive(Debug, Default)]
pub struct Seen {
    /// Reads of a node's ACL.
    pub reads: usize,
    /// Per worker (its nodes' participant id): the sessions (ephemeral owners) whose nodes were
    /// read. More than one: the worker's `Session` was re-created after an expiry, or its
    /// process respawned.
    pub owners: BTreeMap<String, BTreeSet<i64>>,
    /// Nodes whose ACL was not exactly the run's identity with every permission.
    pub wrong: Vec<String>,
}

impl Seen {
    /// The phase's report lines and its violations.
    pub fn verdict(&self, expected: &str) -> (Vec<String>, usize) {
        let sessions: usize = self.owners.values().map(BTreeSet::len).sum();
        let renewed: usize = self.owners.values().map(|s| s.len().saturating_sub(1)).sum();
        let mut lines = vec![format!(
            "  sasl: {} ACL reads of the recipes' nodes, of {sessions} worker sessions ({renewed} of them a \
             worker's later session: re-created after an expiry or a respawned process): {} with another ACL \
             than {expected} (creator-only)",
            self.reads,
            self.wrong.len()
        )];
        for w in self.wrong.iter().take(10) {
            lines.push(format!("    VIOLATION: {w}"));
        }
        let mut violations = self.wrong.len();
        if self.owners.is_empty() {
            lines.push(
                "    VIOLATION: no worker node was seen: nothing shows the workers authenticated".into(),
            );
            violations += 1;
        }
        (lines, violations)
    }
}

/// Reads the ACL of every node under `paths` (and of the paths) every 200 ms, as the run's
/// identity (`expected`, `scheme:id`), until aborted.
pub async fn sample(connect: String, paths: Vec<String>, expected: String, seen: Arc<Mutex<Seen>>) {
    let session = loop {
        match self::connect(&connect, Duration::from_secs(10)).await {
            Ok(session) => break session,
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        // (A fault may cut this session off for a while: what it cannot read now it reads later.)
        let Ok(client) = session.client() else { continue };
        for path in &paths {
            let children = client.list_children(path).await.unwrap_or_default();
            let nodes = std::iter::once(path.clone()).chain(children.iter().map(|c| format!("{path}/{c}")));
            for node in nodes {
                // (A node gone before it was read is not counted.)
                let Some((owner, wrong)) = read(&client, &node, &expected).await else { continue };
                let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                seen.reads += 1;
                if let Some((worker, session)) = owner {
                    seen.owners.entry(worker).or_default().insert(session);
                }
                seen.wrong.extend(wrong);
            }
        }
    }
}

/// `node`'s worker and session (for a worker's ephemeral node: its data is the worker's
/// participant id, `p0w1`), and what is wrong with its ACL, if anything; `None` when it could
/// not be read.
async fn read(
    client: &Client,
    node: &str,
    expected: &str,
) -> Option<(Option<(String, i64)>, Option<String>)> {
    let (acls, stat) = client.get_acl(node).await.ok()?;
    let owner = match stat.ephemeral_owner {
        0 => None,
        session => {
            let (data, _) = client.get_data(node).await.ok()?;
            let worker = String::from_utf8_lossy(&data).into_owned();
            is_worker(&worker).then_some((worker, session))
        }
    };
    let shown: Vec<String> = acls.iter().map(|a| format!("{}:{}", a.scheme(), a.id())).collect();
    let right = shown == [expected] && acls[0].permission() == Permission::ALL;
    let wrong = (!right)
        .then(|| format!("{node}: {shown:?} {:?}", acls.iter().map(Acl::permission).collect::<Vec<_>>()));
    Some((owner, wrong))
}

/// Whether `id` is a worker's participant id (`p<process>w<worker>`).
fn is_worker(id: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    id.strip_prefix('p').and_then(|rest| rest.split_once('w')).is_some_and(|(p, w)| digits(p) && digits(w))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_worker_is_known_by_its_participant_id() {
        assert!(super::is_worker("p0w1") && super::is_worker("p1w12"));
        for other in ["", "p0", "pw1", "p0w", "x0w1", "p0w1x", "REVOKE"] {
            assert!(!super::is_worker(other), "{other}");
        }
    }
}
