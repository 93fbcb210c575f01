//! What zklock records in its queue node so that `zklock deadlocks` can tie its session to the
//! work it belongs to ([`zk_recipes::Party`]): the node of an enclosing zklock (a nested run
//! sees `ZKLOCK_NODE` in its environment), the host, its own process and its parent's (pid and
//! start time), and for `hold` that it holds on its parent's behalf.
//!
//! The parent is recorded only when it can be "the script": not pid 1 and not a session
//! leader. A login shell (on a terminal, in tmux, over ssh), a daemon (cron, systemd, sshd)
//! leads its session; a script it starts does not. So a `hold` and a `run` started by one
//! script are one party, and two started by an interactive shell, or by cron, are not. (A
//! script that leads its own session, as a systemd service's `ExecStart` or under `setsid`,
//! is not recognised: its zklocks stay parties of their own.)

use zk_recipes::Party;

/// A process's parent, session and start time (clock ticks since boot), from `/proc/PID/stat`.
fn stat(pid: &str) -> Option<(u32, u32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold anything: the fields follow its last `)`.
    let fields: Vec<&str> = text.get(text.rfind(')')? + 1..)?.split_whitespace().collect();
    // Field 3 (state) is fields[0]: ppid is field 4, session 6, starttime 22.
    Some((fields.get(1)?.parse().ok()?, fields.get(3)?.parse().ok()?, fields.get(19)?.parse().ok()?))
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|t| t.trim().to_string()).filter(|t| !t.is_empty())
}

/// The party evidence of this zklock process; `holds_for_parent` for `hold`.
pub fn party(holds_for_parent: bool) -> Party {
    let mut party = Party::default();
    party.within = std::env::var("ZKLOCK_NODE").ok().filter(|n| n.starts_with('/'));
    let Some((ppid, _, start)) = stat("self") else { return party };
    let host = read("/proc/sys/kernel/hostname").unwrap_or_else(|| "?".into());
    // The boot tells two lives of one host apart (pids and start times begin again).
    let boot: String = read("/proc/sys/kernel/random/boot_id").unwrap_or_default().chars().take(8).collect();
    party.host = Some(format!("{host}.{boot}"));
    party.process = Some(format!("{}.{start}", std::process::id()));
    if let Some((_, session, pstart)) = stat(&ppid.to_string()) {
        if ppid > 1 && session != ppid {
            party.parent = Some(format!("{ppid}.{pstart}"));
            party.for_parent = holds_for_parent;
        }
    }
    party
}
