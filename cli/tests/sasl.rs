//! `zklock` with SASL against servers that require it: `--sasl digest:USER` with
//! the password from the environment or a file, `--sasl gssapi --keytab --principal` against a
//! real KDC (with the `sasl-gssapi` feature); refusals are exit 69 with one line naming the
//! mechanism, bad flags exit 64.

use std::process::Command;
use std::time::Duration;

use zk_testcluster::{ClusterConfig, SaslMode, ZkCluster};

const ZKLOCK: &str = env!("CARGO_BIN_EXE_zklock");

fn zklock(connect: &str) -> Command {
    let mut cmd = Command::new(ZKLOCK);
    cmd.env("ZK_CONNECT", connect).env_remove("RUST_LOG").env_remove("ZK_SASL_PASSWORD");
    cmd
}

/// Runs `cmd` to its end, bounded against a hang.
async fn output(mut cmd: Command) -> std::process::Output {
    tokio::time::timeout(Duration::from_secs(60), tokio::task::spawn_blocking(move || cmd.output()))
        .await
        .expect("zklock hung")
        .expect("join")
        .expect("zklock runs")
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_digest_md5_from_the_environment_or_a_file_and_refusals_exit_69() {
    let users = vec![("alice".to_string(), "alice-secret".to_string())];
    let zk =
        ZkCluster::start(ClusterConfig { sasl: SaslMode::DigestMd5 { users }, ..ClusterConfig::default() })
            .await
            .unwrap();
    let c = zk.connect_string();
    let script = ["sh", "-c", "test -n \"$ZKLOCK_FENCING_TOKEN\" && echo ran"];

    let mut cmd = zklock(&c);
    cmd.env("ZK_SASL_PASSWORD", "alice-secret").args(["--sasl", "digest:alice", "run", "/locks/sasl", "--"]);
    cmd.args(script);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ran");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("password");
    std::fs::write(&file, "alice-secret\n").unwrap();
    let mut cmd = zklock(&c);
    cmd.env("ZK_SASL", "digest:alice").env("ZK_SASL_PASSWORD_FILE", &file);
    cmd.args(["status", "--json", "/locks/sasl"]);
    let out = output(cmd).await;
    assert!(out.status.success(), "{}", stderr(&out));

    // Refused: no SASL, a wrong password. One line, exit 69, the password nowhere.
    let out = output({
        let mut cmd = zklock(&c);
        cmd.args(["--connect-timeout", "5s", "run", "/locks/sasl", "--", "true"]);
        cmd
    })
    .await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(err.contains("authentication refused") && err.contains("(none)"), "{err}");
    let mut cmd = zklock(&c);
    cmd.env("ZK_SASL_PASSWORD", "not-it").args([
        "--sasl",
        "digest:alice",
        "run",
        "/locks/sasl",
        "--",
        "true",
    ]);
    let out = output(cmd).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(
        err.contains("DIGEST-MD5") && !err.contains("not-it") && err.trim().lines().count() == 1,
        "{err}"
    );

    // Bad input: no password, an unknown mechanism.
    let out = output({
        let mut cmd = zklock(&c);
        cmd.args(["--sasl", "digest:alice", "status", "/x"]);
        cmd
    })
    .await;
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert!(stderr(&out).contains("ZK_SASL_PASSWORD"), "{}", stderr(&out));
    let out = output({
        let mut cmd = zklock(&c);
        cmd.args(["--sasl", "plain", "status", "/x"]);
        cmd
    })
    .await;
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
}

#[cfg(feature = "sasl-gssapi")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_kerberos_from_a_keytab_and_a_missing_keytab_is_usage() {
    use zk_testcluster::{Kdc, KERBEROS_REALM};
    let kdc = Kdc::start().await.unwrap();
    let sasl = kdc.zookeeper_service("127.0.0.1").unwrap();
    let zk = ZkCluster::start(ClusterConfig { sasl, ..ClusterConfig::default() }).await.unwrap();
    let c = zk.connect_string();
    let keytab = kdc.principal("svc").unwrap();
    let krb5 = kdc.krb5_conf();
    let principal = format!("svc@{KERBEROS_REALM}");

    let mut cmd = zklock(&c);
    cmd.env("KRB5_CONFIG", &krb5).env_remove("KRB5CCNAME").env_remove("KRB5_CLIENT_KTNAME");
    cmd.args(["--sasl", "gssapi", "--keytab"]).arg(&keytab).args(["--principal", &principal]);
    cmd.args(["run", "/locks/krb", "--", "sh", "-c", "echo ran"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ran");

    let mut cmd = zklock(&c);
    cmd.env("KRB5_CONFIG", &krb5).env("ZK_SASL", "gssapi").env("ZK_KEYTAB", "/nonexistent.keytab");
    cmd.args(["status", "/locks/krb"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert!(stderr(&out).contains("/nonexistent.keytab"), "{}", stderr(&out));
}

/// The `.deb`'s build (no `sasl-gssapi`): `--sasl gssapi` is bad input that says why.
#[cfg(not(feature = "sasl-gssapi"))]
#[test]
fn without_kerberos_built_in_gssapi_is_usage_saying_so() {
    let out = zklock("127.0.0.1:1").args(["--sasl", "gssapi", "status", "/x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert!(stderr(&out).contains("--features sasl-gssapi"), "{}", stderr(&out));
}
