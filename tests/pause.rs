//! A holder whose process is paused (SIGSTOP) past its session timeout, while another process
//! takes the lock, must not say `Held` (nor let `ensure_safe` pass) right after it resumes,
//! whatever its event loop has seen yet. `examples/paused_holder.rs` is the paused process.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use common::*;
use zk_recipes::InterProcessMutex;

const SESSION: Duration = Duration::from_secs(2);

/// The next line of the holder's output that starts with `prefix` (off the runtime).
async fn line_starting(out: &mut Option<BufReader<ChildStdout>>, prefix: &'static str) -> String {
    let mut reader = out.take().expect("holder output");
    let (reader, line) = within(
        prefix,
        tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            loop {
                line.clear();
                if reader.read_line(&mut line).expect("read holder output") == 0 {
                    panic!("the holder ended before printing {prefix}");
                }
                if line.starts_with(prefix) {
                    return (reader, line.trim().to_string());
                }
            }
        }),
    )
    .await
    .expect("reader task");
    *out = Some(reader);
    line
}

/// Waits until the process is stopped (state `T` in `/proc/PID/stat`).
async fn stopped(pid: u32) {
    eventually("the holder stopped", || async move {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state follows the command name's closing parenthesis.
        stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T'))
    })
    .await;
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: a plain kill(2) of our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0, "kill({sig})");
}

/// Takes the lock in a holder process, pauses it past its session while this process takes the
/// lock, resumes it and returns its `CHECK`, `LOST` and `FINAL` lines.
async fn pause_past_the_session(path: &str, policy: &str, runtime: &str) -> [String; 3] {
    let zk = standalone().await;
    let mut child = Command::new(example_binary("paused_holder"))
        .args([zk.connect_string().as_str(), path, &SESSION.as_millis().to_string(), policy, runtime])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the holder");
    let mut out = Some(BufReader::new(child.stdout.take().unwrap()));
    let held = line_starting(&mut out, "HELD").await;
    let token: u64 = held["HELD ".len()..].parse().expect("token");

    signal(&child, libc::SIGSTOP);
    stopped(child.id()).await;
    // The lock comes to us once the server has expired the paused holder's session.
    let session = session(&zk.connect_string()).await;
    let mutex = InterProcessMutex::new(&session, path).unwrap();
    let ours = within("the lock, after the holder's session expired", mutex.acquire()).await.unwrap();
    assert!(ours.fencing_token() > token, "a newer holder has a larger token");

    // The question is on its stdin before it runs again: it is asked the moment it resumes.
    child.stdin.as_mut().unwrap().write_all(b"CHECK\n").unwrap();
    child.stdin.as_mut().unwrap().flush().unwrap();
    signal(&child, libc::SIGCONT);
    let check = line_starting(&mut out, "CHECK").await;
    let lost = line_starting(&mut out, "LOST").await;
    let last = line_starting(&mut out, "FINAL").await;
    let status = within("the holder's exit", tokio::task::spawn_blocking(move || child.wait())).await;
    assert!(status.unwrap().unwrap().success(), "the holder failed");
    ours.release().await.unwrap();
    [check, lost, last]
}

/// With the holder's event loop kept from running until it is asked, only the clock can tell
/// the hold is not safe: `current_status()` and `status()` must not say `Held`, and
/// `ensure_safe` fails (the default policy counts `Suspended` as lost). Then `lost()` resolves,
/// and the hold ends `Lost` once the client learns of the expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_paused_past_its_session_is_not_held_the_moment_it_resumes() {
    let [check, lost, last] = pause_past_the_session("/locks/paused-blocked", "standard", "blocked").await;
    assert_eq!(
        check, "CHECK current=Suspended ensure=LockLost status=Suspended",
        "asked right after SIGCONT"
    );
    assert!(lost == "LOST Suspended" || lost == "LOST Lost", "lost() resolved: {lost}");
    assert_eq!(last, "FINAL Lost");
}

/// The same with the event loop free to run and only `Lost` counting as lost (`SessionOnly`):
/// whichever runs first after the resume, the answers are never `Held`, and `ensure_safe`
/// reports the closed window (or the loss, if the expiry was already seen).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_its_loop_running_and_the_session_policy_it_is_not_safe_either() {
    let [check, _, last] = pause_past_the_session("/locks/paused-free", "session", "free").await;
    assert!(!check.contains("Held"), "right after SIGCONT: {check}");
    assert!(
        check.contains("ensure=UnsafeWindow") || check.contains("ensure=LockLost"),
        "ensure_safe must fail right after SIGCONT: {check}"
    );
    assert_eq!(last, "FINAL Lost");
}

/// While connected, `ensure_safe` returns what is left of the window (at most the session
/// timeout), refuses a margin the window cannot give, and fails once released; the token fits
/// a signed column unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensure_safe_gives_the_window_left_and_refuses_a_margin_it_cannot_give() {
    let zk = standalone().await;
    let session = session_with_timeout(&zk.connect_string(), SESSION).await;
    let mutex = InterProcessMutex::new(&session, "/locks/ensure-safe").unwrap();
    let guard = within("acquire", mutex.acquire()).await.unwrap();
    let left = guard.ensure_safe(Duration::from_millis(100)).expect("safe while connected");
    assert!(left > Duration::from_millis(100) && left <= session.session_timeout(), "left {left:?}");
    match guard.ensure_safe(session.session_timeout() * 2) {
        Err(zk_recipes::Error::UnsafeWindow { left, margin, .. }) => {
            assert!(left < margin, "{left:?} < {margin:?}")
        }
        other => panic!("a margin beyond the window must be refused: {other:?}"),
    }
    assert_eq!(guard.fencing_token_i64() as u64, guard.fencing_token());
    assert!(guard.fencing_token_i64() > 0);
    // Our node deleted by someone else: the hold is lost, and nothing is safe.
    let admin = client(&zk.connect_string()).await;
    let mut status = guard.status();
    admin.delete(guard.node_path(), None).await.unwrap();
    within("Lost", status.wait_for(|s| *s == zk_recipes::LockStatus::Lost)).await.unwrap();
    assert!(matches!(guard.ensure_safe(Duration::ZERO), Err(zk_recipes::Error::LockLost { .. })));
    drop(guard);
}
