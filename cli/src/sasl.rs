//! SASL from the flags: `--sasl digest:USER` (DIGEST-MD5, the password from `ZK_SASL_PASSWORD`
//! or `--sasl-password-file`, never from the command line) or `--sasl gssapi` (Kerberos, with
//! `--keytab`, `--principal`, `--sasl-service`, `--sasl-host`).

use std::path::PathBuf;

use zk_recipes::SaslConfig;

use crate::exit::{self, Failure};

/// The SASL flags (global).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct SaslArgs {
    /// SASL authentication on every connection: `digest:USER` (DIGEST-MD5, the password from
    /// the environment variable ZK_SASL_PASSWORD or from --sasl-password-file, never on the
    /// command line) or `gssapi` (Kerberos: the keytab of --keytab, or the credential cache
    /// KRB5CCNAME). Servers that require SASL refuse zklock without it (exit 69).
    #[arg(long, env = "ZK_SASL", value_name = "MECHANISM", global = true)]
    pub sasl: Option<String>,
    /// DIGEST-MD5: read the password from this file (its first line).
    #[arg(long, env = "ZK_SASL_PASSWORD_FILE", value_name = "FILE", global = true)]
    pub sasl_password_file: Option<PathBuf>,
    /// GSSAPI: get (and renew) tickets from this keytab, into a credential cache private to
    /// this zklock (sets KRB5_CLIENT_KTNAME and KRB5CCNAME=MEMORY:).
    #[arg(long, env = "ZK_KEYTAB", value_name = "FILE", global = true)]
    pub keytab: Option<PathBuf>,
    /// GSSAPI: the client principal to authenticate as (name@REALM) [default: the credential
    /// cache's, or the keytab's first].
    #[arg(long, env = "ZK_PRINCIPAL", value_name = "PRINCIPAL", global = true)]
    pub principal: Option<String>,
    /// GSSAPI: the first part of the servers' principal [default: zookeeper].
    #[arg(long, env = "ZK_SASL_SERVICE", value_name = "NAME", global = true)]
    pub sasl_service: Option<String>,
    /// GSSAPI: the host part of the servers' principal [default: each server's host as
    /// written in --connect].
    #[arg(long, env = "ZK_SASL_HOST", value_name = "HOST", global = true)]
    pub sasl_host: Option<String>,
}

impl SaslArgs {
    /// Points MIT Kerberos at `--keytab` with a private in-memory cache. Called before any
    /// thread starts (the environment is process-wide).
    pub fn prepare_env(&self) {
        if let (Some(mechanism), Some(keytab)) = (&self.sasl, &self.keytab) {
            if mechanism == "gssapi" {
                std::env::set_var("KRB5_CLIENT_KTNAME", keytab);
                std::env::set_var("KRB5CCNAME", format!("MEMORY:zklock-{}", std::process::id()));
            }
        }
    }

    /// The SASL configuration the flags ask for, if any.
    pub fn config(&self) -> Result<Option<SaslConfig>, Failure> {
        let usage = |message: String| Failure::new(exit::USAGE, message);
        let Some(mechanism) = &self.sasl else {
            return match (&self.sasl_password_file, &self.keytab, &self.principal) {
                (None, None, None) => Ok(None),
                _ => Err(usage("--sasl-password-file, --keytab and --principal need --sasl".into())),
            };
        };
        if let Some(user) = mechanism.strip_prefix("digest:") {
            if user.is_empty() {
                return Err(usage("--sasl digest:USER needs a user name".into()));
            }
            if self.keytab.is_some() || self.principal.is_some() {
                return Err(usage("--keytab and --principal are for --sasl gssapi".into()));
            }
            return Ok(Some(SaslConfig::digest_md5(user, self.password()?)));
        }
        if mechanism == "gssapi" {
            return self.gssapi();
        }
        Err(usage(format!("--sasl {mechanism}: expected digest:USER or gssapi")))
    }

    /// The DIGEST-MD5 password: `--sasl-password-file`'s first line, else `ZK_SASL_PASSWORD`.
    fn password(&self) -> Result<String, Failure> {
        let usage = |message: String| Failure::new(exit::USAGE, message);
        if let Some(file) = &self.sasl_password_file {
            let text = std::fs::read_to_string(file)
                .map_err(|e| usage(format!("--sasl-password-file {}: {e}", file.display())))?;
            let password = text.lines().next().unwrap_or_default().to_string();
            if password.is_empty() {
                return Err(usage(format!(
                    "--sasl-password-file {}: the first line is empty",
                    file.display()
                )));
            }
            return Ok(password);
        }
        match std::env::var("ZK_SASL_PASSWORD") {
            Ok(password) if !password.is_empty() => Ok(password),
            _ => Err(usage(
                "--sasl digest:USER needs a password: set ZK_SASL_PASSWORD or --sasl-password-file".into(),
            )),
        }
    }

    #[cfg(feature = "sasl-gssapi")]
    fn gssapi(&self) -> Result<Option<SaslConfig>, Failure> {
        if self.sasl_password_file.is_some() {
            return Err(Failure::new(exit::USAGE, "--sasl-password-file is for --sasl digest:USER"));
        }
        if let Some(keytab) = &self.keytab {
            if let Err(e) = std::fs::metadata(keytab) {
                return Err(Failure::new(exit::USAGE, format!("--keytab {}: {e}", keytab.display())));
            }
        }
        let mut sasl = SaslConfig::gssapi();
        if let Some(principal) = &self.principal {
            sasl = sasl.principal(principal);
        }
        if let Some(service) = &self.sasl_service {
            sasl = sasl.service_name(service);
        }
        if let Some(host) = &self.sasl_host {
            sasl = sasl.service_host(host);
        }
        Ok(Some(sasl))
    }

    #[cfg(not(feature = "sasl-gssapi"))]
    fn gssapi(&self) -> Result<Option<SaslConfig>, Failure> {
        Err(Failure::new(
            exit::USAGE,
            "--sasl gssapi: this zklock was built without Kerberos (the static .deb has DIGEST-MD5 \
             only); build it with `cargo install zklock --features sasl-gssapi`",
        ))
    }
}
