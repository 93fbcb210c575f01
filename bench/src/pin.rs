//! CPU pinning (`--pin`): the ZooKeeper servers on one set of CPUs, the clients on the other, so
//! that neither side's work runs on the other's cores and the scheduler's placement does not
//! change from one run to the next.
//!
//! The clients are this process (zk-recipes, `LockClient`, the naive recipe and the network
//! scenarios' proxy run in it) and every process it starts, which inherit its set: the Curator
//! and kazoo drivers, our failover and scale children. The servers are pinned by the harness
//! ([`zk_testcluster::ClusterConfig::cpus`]) as they start.

/// What `--pin` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PinMode {
    /// Split the CPUs this process may use: the first half (rounded down) for the servers, the
    /// rest for the clients; nothing pinned with a single CPU.
    Auto,
    /// Leave every process where the scheduler puts it.
    Off,
}

/// The run's pinning: the CPUs there were, and how they were shared, or why they were not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pinning {
    /// The CPUs this process could run on at start.
    pub available: Vec<usize>,
    pub split: Split,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Split {
    Pinned {
        servers: Vec<usize>,
        clients: Vec<usize>,
    },
    /// Not pinned, and why.
    Off(String),
}

impl Pinning {
    /// How `mode` shares `available` (sorted CPU indices).
    pub fn choose(mode: PinMode, available: Vec<usize>) -> Pinning {
        let split = match (mode, available.len()) {
            (PinMode::Off, _) => Split::Off("--pin off".into()),
            (PinMode::Auto, 0 | 1) => Split::Off("a single CPU: nothing to split".into()),
            (PinMode::Auto, n) => {
                let (servers, clients) = available.split_at(n / 2);
                Split::Pinned { servers: servers.to_vec(), clients: clients.to_vec() }
            }
        };
        Pinning { available, split }
    }

    /// The servers' CPUs, when pinned.
    pub fn servers(&self) -> Option<Vec<usize>> {
        match &self.split {
            Split::Pinned { servers, .. } => Some(servers.clone()),
            Split::Off(_) => None,
        }
    }

    /// Pins this process's calling thread to the clients' CPUs. Call it before any other thread
    /// starts (before the async runtime), so that every thread and child process inherits it.
    pub fn pin_clients(&self) -> Result<(), String> {
        match &self.split {
            Split::Pinned { clients, .. } => set_own_cpus(clients),
            Split::Off(_) => Ok(()),
        }
    }

    /// The report's line; `network` and `fencing`: whether those scenarios ran (the proxy runs
    /// in this process; the fencing servers are not pinned).
    pub fn describe(&self, network: bool, fencing: bool) -> String {
        match &self.split {
            Split::Off(why) => {
                format!("CPU pinning: off ({why}); servers and clients share CPUs {}", list(&self.available))
            }
            Split::Pinned { servers, clients } => format!(
                "CPU pinning: ZooKeeper servers on CPU{} {}, clients on CPU{} {} (this process with \
                 zk-recipes, LockClient, the naive recipe{}, and the Curator and kazoo driver \
                 processes){}",
                plural(servers),
                list(servers),
                plural(clients),
                list(clients),
                if network { " and the 1 ms network's proxy" } else { "" },
                if fencing {
                    "; the fencing scenario's PostgreSQL and Redis run on the clients' CPUs"
                } else {
                    ""
                }
            ),
        }
    }
}

fn plural(cpus: &[usize]) -> &'static str {
    if cpus.len() == 1 {
        ""
    } else {
        "s"
    }
}

/// The CPUs this process may run on (its calling thread's affinity), ascending.
pub fn available() -> Result<Vec<usize>, String> {
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: sched_getaffinity writes at most the size we pass into the set we own.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(format!("sched_getaffinity: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: every index is below CPU_SETSIZE, inside the set.
    Ok((0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect())
}

/// Pins the calling thread (and so every thread and process it starts later) to `cpus`.
fn set_own_cpus(cpus: &[usize]) -> Result<(), String> {
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
        // SAFETY: `cpu` is below CPU_SETSIZE, inside the set.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: sched_setaffinity reads the set we own, of the size we pass.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(format!("sched_setaffinity({}): {}", list(cpus), std::io::Error::last_os_error()));
    }
    Ok(())
}

/// CPUs as `taskset -c` and `/proc/<pid>/status` write them: `0-3,6`.
pub fn list(cpus: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if j == i { cpus[i].to_string() } else { format!("{}-{}", cpus[i], cpus[j]) });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_in_halves_servers_first() {
        let two = Pinning::choose(PinMode::Auto, vec![0, 1]);
        assert_eq!(two.split, Split::Pinned { servers: vec![0], clients: vec![1] });
        let three = Pinning::choose(PinMode::Auto, vec![0, 1, 2]);
        assert_eq!(three.split, Split::Pinned { servers: vec![0], clients: vec![1, 2] });
        let four = Pinning::choose(PinMode::Auto, vec![2, 3, 4, 5]);
        assert_eq!(four.split, Split::Pinned { servers: vec![2, 3], clients: vec![4, 5] });
        assert!(matches!(Pinning::choose(PinMode::Auto, vec![3]).split, Split::Off(_)));
        assert!(matches!(Pinning::choose(PinMode::Off, vec![0, 1]).split, Split::Off(_)));
        assert_eq!(Pinning::choose(PinMode::Off, vec![0, 1]).servers(), None);
        assert!(Pinning::choose(PinMode::Auto, vec![0]).describe(false, false).contains("single CPU"));
    }

    #[test]
    fn lists_as_taskset_does() {
        assert_eq!(list(&[0, 1, 2, 3, 6]), "0-3,6");
        assert_eq!(list(&[1]), "1");
        assert_eq!(list(&[0, 2, 4, 5]), "0,2,4-5");
        assert_eq!(list(&[]), "");
    }

    /// Pinning a thread shows in its `/proc/thread-self/status`, and its children inherit it.
    #[test]
    fn a_pinned_thread_runs_on_its_set_only() {
        let ours = available().expect("affinity");
        assert!(!ours.is_empty());
        let last = *ours.last().unwrap();
        std::thread::spawn(move || {
            set_own_cpus(&[last]).expect("pin");
            let status = std::fs::read_to_string("/proc/thread-self/status").expect("status");
            let allowed = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).expect("line");
            assert_eq!(allowed.trim(), last.to_string());
            assert_eq!(available().expect("affinity"), vec![last]);
            let child =
                std::process::Command::new("cat").arg("/proc/self/status").output().expect("a child process");
            let text = String::from_utf8_lossy(&child.stdout);
            let inherited = text.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).expect("line");
            assert_eq!(inherited.trim(), last.to_string());
        })
        .join()
        .expect("the pinned thread");
    }
}
