//! The throwaway Kerberos KDC: a realm of its own in a temp dir, on a free loopback port,
//! principals and keytabs made by the harness, stopped by PID (also when a test panics).

mod common;

use std::process::Command;

use common::alive;
use zk_testcluster::{Kdc, SaslMode, KERBEROS_REALM};

/// `kinit -k -t keytab principal` against `kdc`'s realm, into a throwaway memory cache.
fn kinit(kdc: &Kdc, keytab: &std::path::Path, principal: &str) -> std::process::Output {
    Command::new("kinit")
        .arg("-k")
        .arg("-t")
        .arg(keytab)
        .arg(principal)
        .env("KRB5_CONFIG", kdc.krb5_conf())
        .env("KRB5CCNAME", "MEMORY:test")
        .output()
        .expect("kinit runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kdc_issues_tickets_for_the_principals_it_makes_and_stops_by_pid() {
    let mut kdc = Kdc::start().await.expect("start a KDC");
    let krb5 = std::fs::read_to_string(kdc.krb5_conf()).unwrap();
    assert!(krb5.contains(&format!("127.0.0.1:{}", kdc.port())), "{krb5}");
    assert!(krb5.contains("dns_canonicalize_hostname = false"), "{krb5}");

    let keytab = kdc.principal("alice").unwrap();
    let out = kinit(&kdc, &keytab, "alice");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // A principal the KDC no longer knows gets no ticket.
    kdc.delete_principal("alice").unwrap();
    let out = kinit(&kdc, &keytab, "alice");
    assert!(!out.status.success(), "a deleted principal got a ticket");

    match kdc.zookeeper_service("127.0.0.1").unwrap() {
        SaslMode::Kerberos { principal, keytab, krb5_conf } => {
            assert_eq!(principal, format!("zookeeper/127.0.0.1@{KERBEROS_REALM}"));
            assert!(keytab.is_file() && krb5_conf == kdc.krb5_conf());
        }
        other => panic!("{other:?}"),
    }

    let pid = kdc.pid();
    assert!(alive(pid));
    kdc.stop();
    assert!(!alive(pid), "the KDC {pid} outlived stop()");
    kdc.stop(); // idempotent
}

#[test]
fn a_kdc_dropped_while_panicking_is_stopped() {
    let (tx, rx) = std::sync::mpsc::channel();
    let panicked = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let kdc = rt.block_on(Kdc::start()).expect("start a KDC");
        tx.send(kdc.pid()).unwrap();
        panic!("a test failing while the KDC runs");
    })
    .join();
    assert!(panicked.is_err());
    let pid = rx.recv().unwrap();
    assert!(!alive(pid), "the KDC {pid} outlived a panic");
}
