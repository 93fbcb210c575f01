//! SASL authentication at connect (cargo features `sasl-digest-md5` and `sasl-gssapi`, off by
//! default).
//!
//! [`SaslConfig`] says which mechanism and which identity; [`crate::ConnectOptions::sasl`] puts it
//! to use. The client crate runs the SASL exchange on every connection it opens (the first, each
//! reconnection, and the new session a [`crate::Session`] starts after an expiry), before any
//! request, so a session never works unauthenticated when SASL was asked for.
//!
//! GSSAPI takes the process's Kerberos credentials as MIT Kerberos finds them: the credential
//! cache (`KRB5CCNAME`), filled and refreshed from the client keytab (`KRB5_CLIENT_KTNAME`) when
//! one is set. Before connecting, the session acquires them and asks the KDC for the server's
//! service ticket itself, so that a missing keytab, an unknown principal or an unreachable KDC is
//! an [`crate::Error::AuthFailed`] at once, naming the mechanism and what Kerberos said.

use std::borrow::Cow;
use std::time::Duration;

use tokio::time::Instant;
use zookeeper_client::{Client, Error as ZkError, SaslOptions};

use super::features::{connected_again, FeatureCache};

use crate::error::{Error, Result};

/// The mechanism and identity a session authenticates with.
///
/// ```no_run
/// # #[cfg(feature = "sasl-digest-md5")] mod digest {
/// # fn main() {
/// use std::time::Duration;
/// use zk_recipes::{ConnectOptions, SaslConfig};
///
/// let password = std::env::var("ZK_SASL_PASSWORD").unwrap_or_default();
/// let options = ConnectOptions::new(Duration::from_secs(10))
///     .sasl(SaslConfig::digest_md5("orders-service", password));
/// # } }
/// ```
#[derive(Clone)]
pub struct SaslConfig {
    mechanism: Mechanism,
}

#[derive(Clone)]
enum Mechanism {
    #[cfg(feature = "sasl-digest-md5")]
    DigestMd5 { user: String, password: String },
    #[cfg(feature = "sasl-gssapi")]
    Gssapi { service: String, host: Option<String>, principal: Option<String> },
}

impl std::fmt::Debug for SaslConfig {
    /// Shows the mechanism and the identity; the password never reaches logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = f.debug_struct("SaslConfig");
        match &self.mechanism {
            #[cfg(feature = "sasl-digest-md5")]
            Mechanism::DigestMd5 { user, .. } => {
                out.field("mechanism", &"DIGEST-MD5").field("user", user).field("password", &"(redacted)")
            }
            #[cfg(feature = "sasl-gssapi")]
            Mechanism::Gssapi { service, host, principal } => out
                .field("mechanism", &"GSSAPI")
                .field("service", service)
                .field("host", host)
                .field("principal", principal),
        };
        out.finish()
    }
}

impl SaslConfig {
    /// DIGEST-MD5 with a user and password from the server's JAAS `Server` section
    /// (`user_<name>="<password>"`). The server then knows the session as `sasl:<user>`.
    /// DIGEST-MD5 does not encrypt the traffic and its password hashing is weak: use it over
    /// TLS ([`crate::ConnectOptions::tls`]) where the network is not trusted (docs/security.md).
    #[cfg(feature = "sasl-digest-md5")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sasl-digest-md5")))]
    pub fn digest_md5(user: impl Into<String>, password: impl Into<String>) -> SaslConfig {
        SaslConfig { mechanism: Mechanism::DigestMd5 { user: user.into(), password: password.into() } }
    }

    /// GSSAPI (Kerberos v5) with the process's default Kerberos credentials (see the module
    /// docs: `KRB5CCNAME`, `KRB5_CLIENT_KTNAME`, `KRB5_CONFIG`), to the service principal
    /// `zookeeper/<host>` where `<host>` is each server's host as written in the connect
    /// string (change either with [`SaslConfig::service_name`] and
    /// [`SaslConfig::service_host`]). The server knows the session by its principal,
    /// `sasl:<name>@<REALM>` unless it strips host or realm.
    #[cfg(feature = "sasl-gssapi")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sasl-gssapi")))]
    pub fn gssapi() -> SaslConfig {
        SaslConfig {
            mechanism: Mechanism::Gssapi { service: "zookeeper".into(), host: None, principal: None },
        }
    }

    /// GSSAPI: the first part of the servers' principal (Java's `zookeeper.sasl.client.username`),
    /// `zookeeper` by default. Does nothing for other mechanisms.
    #[cfg(feature = "sasl-gssapi")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sasl-gssapi")))]
    #[must_use]
    #[allow(irrefutable_let_patterns)] // with only `sasl-gssapi`, GSSAPI is the only mechanism
    pub fn service_name(mut self, name: impl Into<String>) -> SaslConfig {
        if let Mechanism::Gssapi { service, .. } = &mut self.mechanism {
            *service = name.into();
        }
        self
    }

    /// GSSAPI: the host part of the servers' principal for every server, instead of each
    /// server's host from the connect string (for servers reached by address or through a
    /// proxy, whose principal names another host). Does nothing for other mechanisms.
    #[cfg(feature = "sasl-gssapi")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sasl-gssapi")))]
    #[must_use]
    #[allow(irrefutable_let_patterns)] // with only `sasl-gssapi`, GSSAPI is the only mechanism
    pub fn service_host(mut self, name: impl Into<String>) -> SaslConfig {
        if let Mechanism::Gssapi { host, .. } = &mut self.mechanism {
            *host = Some(name.into());
        }
        self
    }

    /// GSSAPI: the client principal to authenticate as (`name@REALM`), when the credential
    /// cache is empty and the client keytab (`KRB5_CLIENT_KTNAME`) holds several: the session
    /// gets its initial ticket for this one before connecting. Without it, Kerberos takes the
    /// cache's principal, or the keytab's first. Does nothing for other mechanisms.
    #[cfg(feature = "sasl-gssapi")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sasl-gssapi")))]
    #[must_use]
    #[allow(irrefutable_let_patterns)] // with only `sasl-gssapi`, GSSAPI is the only mechanism
    pub fn principal(mut self, name: impl Into<String>) -> SaslConfig {
        if let Mechanism::Gssapi { principal, .. } = &mut self.mechanism {
            *principal = Some(name.into());
        }
        self
    }

    /// The SASL mechanism's name: `DIGEST-MD5` or `GSSAPI`.
    pub fn mechanism(&self) -> &'static str {
        match &self.mechanism {
            #[cfg(feature = "sasl-digest-md5")]
            Mechanism::DigestMd5 { .. } => "DIGEST-MD5",
            #[cfg(feature = "sasl-gssapi")]
            Mechanism::Gssapi { .. } => "GSSAPI",
        }
    }

    /// Whether the servers' principal is taken from the host each connection dials (GSSAPI
    /// without [`SaslConfig::service_host`]): a session that follows the ensemble dials its
    /// relay's loopback address, whose name is no server's principal.
    pub(crate) fn names_service_by_dialed_host(&self) -> bool {
        match &self.mechanism {
            #[cfg(feature = "sasl-digest-md5")]
            Mechanism::DigestMd5 { .. } => false,
            #[cfg(feature = "sasl-gssapi")]
            Mechanism::Gssapi { host, .. } => host.is_none(),
        }
    }

    /// `connector` authenticating with this configuration.
    pub(crate) fn with_sasl(&self, connector: zookeeper_client::Connector) -> zookeeper_client::Connector {
        connector.with_sasl(self.client_options())
    }

    /// The client crate's options for this configuration.
    fn client_options(&self) -> SaslOptions {
        match &self.mechanism {
            #[cfg(feature = "sasl-digest-md5")]
            Mechanism::DigestMd5 { user, password } => {
                SaslOptions::digest_md5(Cow::Owned(user.clone()), Cow::Owned(password.clone())).into()
            }
            #[cfg(feature = "sasl-gssapi")]
            Mechanism::Gssapi { service, host, .. } => {
                let options = SaslOptions::gssapi().with_username(Cow::Owned(service.clone()));
                match host {
                    Some(host) => options.with_hostname(Cow::Owned(host.clone())).into(),
                    None => options.into(),
                }
            }
        }
    }

    /// Checks, before connecting to `hosts`, what can be checked without a server: for GSSAPI,
    /// that Kerberos credentials can be had and that the KDC gives a ticket for the service on
    /// at least one host. Blocking (it may ask the KDC): run on the blocking pool.
    ///
    /// # Errors
    /// `Error::AuthFailed` naming the mechanism and Kerberos' own message.
    #[cfg_attr(not(feature = "sasl-gssapi"), allow(unused_variables))]
    pub(crate) fn preflight(&self, connect: &str, hosts: &[String]) -> Result<()> {
        match &self.mechanism {
            #[cfg(feature = "sasl-digest-md5")]
            Mechanism::DigestMd5 { .. } => Ok(()),
            #[cfg(feature = "sasl-gssapi")]
            Mechanism::Gssapi { service, host, principal } => {
                let targets: Vec<&str> = match host {
                    Some(host) => vec![host.as_str()],
                    None => hosts.iter().map(String::as_str).collect(),
                };
                let mut failures = Vec::new();
                for target in &targets {
                    match kerberos::service_ticket(principal.as_deref(), service, target) {
                        Ok(()) => return Ok(()),
                        Err(reason) => failures.push(format!("{service}@{target}: {reason}")),
                    }
                }
                Err(Error::AuthFailed {
                    connect: connect.to_string(),
                    mechanism: "GSSAPI",
                    reason: format!(
                        "no Kerberos service ticket ({}){}",
                        failures.join("; "),
                        kerberos::env()
                    ),
                })
            }
        }
    }
}

/// Runs [`SaslConfig::preflight`] on the blocking pool, within the attempts' part of the wait;
/// returns `sasl` to configure the connector with.
pub(crate) async fn preflight<'a>(
    sasl: &'a SaslConfig,
    hosts: Vec<String>,
    shown: &str,
    attempts_end: tokio::time::Instant,
    wait: Duration,
) -> Result<&'a SaslConfig> {
    let (check, connect) = (sasl.clone(), shown.to_string());
    let task = tokio::task::spawn_blocking(move || check.preflight(&connect, &hosts));
    let failed = |reason: String| Error::AuthFailed {
        connect: shown.to_string(),
        mechanism: sasl.mechanism(),
        reason,
    };
    match tokio::time::timeout_at(attempts_end, task).await {
        Ok(Ok(checked)) => checked.map(|()| sasl),
        Ok(Err(panicked)) => Err(failed(format!("the credential check failed: {panicked}"))),
        Err(_) => Err(failed(format!("no answer from the KDC within the connect wait ({wait:?})"))),
    }
}

/// Refuses a session the server did not authenticate with SASL although SASL was configured: a
/// server without SASL answers the client's exchange and carries on unauthenticated (seen on
/// 3.8.0), and the client crate takes that as done. Asks `whoami` (3.7+) for the session's
/// identities, once per session (each connection of the client crate re-runs the exchange, but
/// is not asked again). A server that does not know the request (3.6) is trusted; it closes the
/// connection after its `Unimplemented` (not the session), so the check returns only once the
/// client crate has connected again: a request sent next would otherwise meet `ConnectionLoss`.
/// The lack is noted in `features`, for [`crate::Session::whoami`].
pub(crate) async fn check_identity(
    client: &Client,
    sasl: &SaslConfig,
    shown: &str,
    deadline: Instant,
    wait: Duration,
    features: &FeatureCache,
) -> Result<()> {
    let failed = |reason: String| Error::AuthFailed {
        connect: shown.to_string(),
        mechanism: sasl.mechanism(),
        reason,
    };
    // Watching from before the request: the reconnection after an `Unimplemented` may be over
    // by the time its answer is read.
    let mut states = client.state_watcher();
    match tokio::time::timeout_at(deadline, client.list_auth_users()).await {
        Ok(Ok(users)) if users.iter().any(|user| user.scheme() == "sasl") => Ok(()),
        Ok(Ok(users)) => {
            let schemes: Vec<&str> = users.iter().map(|user| user.scheme()).collect();
            Err(failed(format!(
                "the server did not authenticate the session with SASL (it knows it only as {schemes:?}): \
                 is SASL configured on the server (a JAAS `Server` section, authProvider.sasl)?"
            )))
        }
        Ok(Err(ZkError::Unimplemented)) => {
            tracing::debug!("the server has no whoami (ZooKeeper 3.6): SASL identity not checked");
            features.note_no_whoami();
            connected_again(&mut states, deadline, wait).await.map_err(failed)
        }
        Ok(Err(e)) => Err(failed(format!("asking the server for the session's identity (whoami): {e}"))),
        Err(_) => Err(failed(format!("no answer to whoami within the connect wait ({wait:?})"))),
    }
}

#[cfg(feature = "sasl-gssapi")]
mod kerberos {
    use libgssapi::context::{ClientCtx, CtxFlags, SecurityContext};
    use libgssapi::credential::{Cred, CredUsage};
    use libgssapi::name::Name;
    use libgssapi::oid::{OidSet, GSS_MECH_KRB5, GSS_NT_HOSTBASED_SERVICE, GSS_NT_KRB5_PRINCIPAL};

    /// Where MIT Kerberos looks for credentials, as this process's environment says (paths and
    /// names only), for error messages.
    pub(super) fn env() -> String {
        let shown: Vec<String> = ["KRB5CCNAME", "KRB5_CLIENT_KTNAME", "KRB5_CONFIG"]
            .iter()
            .filter_map(|key| std::env::var(key).ok().map(|value| format!("{key}={value}")))
            .collect();
        if shown.is_empty() {
            " (no KRB5CCNAME, KRB5_CLIENT_KTNAME or KRB5_CONFIG set: Kerberos' defaults)".to_string()
        } else {
            format!(" ({})", shown.join(", "))
        }
    }

    /// Acquires the initiator's credentials (as `principal` when given) and runs the first step
    /// of a context to `service@host`: the KDC is asked for a service ticket, as the SASL
    /// exchange will. Returns GSSAPI's message on failure.
    pub(super) fn service_ticket(principal: Option<&str>, service: &str, host: &str) -> Result<(), String> {
        fn gss(what: &'static str) -> impl Fn(libgssapi::error::Error) -> String {
            move |e| format!("{what}: {e}")
        }
        let mut krb5 = OidSet::new().map_err(gss("GSSAPI"))?;
        krb5.add(&GSS_MECH_KRB5).map_err(gss("GSSAPI"))?;
        let name = match principal {
            Some(p) => Some(Name::new(p.as_bytes(), Some(&GSS_NT_KRB5_PRINCIPAL)).map_err(gss("principal"))?),
            None => None,
        };
        let cred = Cred::acquire(name.as_ref(), None, CredUsage::Initiate, Some(&krb5))
            .map_err(gss("acquiring credentials"))?;
        let target = Name::new(format!("{service}@{host}").as_bytes(), Some(&GSS_NT_HOSTBASED_SERVICE))
            .map_err(gss("service name"))?;
        let mut ctx = ClientCtx::new(Some(cred), target, CtxFlags::GSS_C_MUTUAL_FLAG, Some(&GSS_MECH_KRB5));
        ctx.step(None, None).map_err(gss("service ticket"))?;
        let _ = ctx.is_complete();
        Ok(())
    }
}
