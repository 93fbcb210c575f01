//! The orchestrator's worker processes: spawned from this same executable, fed requests on
//! stdin, heard on stdout, paused and resumed by signal, and always killed by PID on drop.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::protocol::{Reply, Request};
use crate::Error;

/// How many requests one worker process runs at once.
pub const IN_FLIGHT: usize = 3;
/// The longest a worker may stay silent while it owes an answer.
pub const SILENCE: Duration = Duration::from_secs(60);

/// What a worker's stdout reader reports.
enum Event {
    Line(Reply),
    Eof,
}

struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    in_flight: usize,
}

/// The worker processes of one run.
pub struct Pool {
    workers: Vec<Worker>,
    events: mpsc::UnboundedReceiver<(usize, Event)>,
    /// Where the next round-robin dispatch starts.
    next: usize,
}

impl Pool {
    /// Spawns `n` workers: this executable with `--worker INDEX` and `args`.
    pub fn spawn(n: usize, args: &[String]) -> Result<Pool, Error> {
        let exe = std::env::current_exe()?;
        let (tx, events) = mpsc::unbounded_channel();
        let mut pool = Pool { workers: Vec::new(), events, next: 0 };
        for index in 0..n {
            let mut child = Command::new(&exe)
                .arg("--worker")
                .arg(index.to_string())
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot start worker process {index} ({}): {e}", exe.display()))?;
            let stdout = child.stdout.take().ok_or("no stdout")?;
            let stdin = child.stdin.take();
            pool.workers.push(Worker { child, stdin, in_flight: 0 });
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    match Reply::decode(&line) {
                        Some(reply) => {
                            let _ = tx.send((index, Event::Line(reply)));
                        }
                        None => eprintln!("[worker {index}] {line}"),
                    }
                }
                let _ = tx.send((index, Event::Eof));
            });
        }
        Ok(pool)
    }

    pub fn len(&self) -> usize {
        self.workers.len()
    }

    pub fn pid(&self, worker: usize) -> u32 {
        self.workers[worker].child.id()
    }

    /// Sends one request to one worker.
    pub fn send(&mut self, worker: usize, request: &Request) -> Result<(), Error> {
        let w = &mut self.workers[worker];
        let stdin = w.stdin.as_mut().ok_or_else(|| format!("worker {worker}'s stdin is closed"))?;
        stdin
            .write_all(request.encode().as_bytes())
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("cannot send a request to worker {worker}: {e}"))?;
        w.in_flight += 1;
        Ok(())
    }

    /// The next line from any worker (`SILENCE` at most); a worker that exits is an error.
    pub async fn next(&mut self) -> Result<(usize, Reply), Error> {
        let (worker, event) = tokio::time::timeout(SILENCE, self.events.recv())
            .await
            .map_err(|_| format!("no worker said anything for {SILENCE:?}"))?
            .ok_or("every worker's output closed")?;
        match event {
            Event::Line(reply) => {
                if reply.id().is_some() && matches!(reply.kind.as_str(), "DONE" | "LATE") {
                    let w = &mut self.workers[worker];
                    w.in_flight = w.in_flight.saturating_sub(1);
                }
                Ok((worker, reply))
            }
            Event::Eof => {
                let status = self.workers[worker].child.try_wait()?;
                Err(format!("worker {worker} (pid {}) exited early: {status:?}", self.pid(worker)).into())
            }
        }
    }

    /// Runs `requests` on the workers in `on` (round-robin, at most `IN_FLIGHT` each) and
    /// returns every answer, in completion order. A request with a preferred worker in
    /// `requests` (`Some(w)`) goes to that worker.
    pub async fn run(
        &mut self,
        requests: Vec<(Request, Option<usize>)>,
        on: &[usize],
    ) -> Result<Vec<(usize, Reply)>, Error> {
        let mut pending: std::collections::VecDeque<_> = requests.into();
        let total = pending.len();
        let mut answers = Vec::new();
        while answers.len() < total {
            // Fill every free slot, keeping the queue's order.
            while let Some((request, preferred)) = pending.front() {
                let pick = match preferred {
                    Some(w) => Some(*w).filter(|w| self.workers[*w].in_flight < IN_FLIGHT),
                    None => (0..on.len())
                        .map(|i| on[(self.next + i) % on.len()])
                        .find(|w| self.workers[*w].in_flight < IN_FLIGHT),
                };
                let Some(worker) = pick else { break };
                let request = request.clone();
                self.send(worker, &request)?;
                self.next = (self.next + 1) % on.len().max(1);
                pending.pop_front();
            }
            let (worker, reply) = self.next().await?;
            if reply.kind == "DONE" {
                answers.push((worker, reply));
            } else {
                return Err(format!("worker {worker}: unexpected {}", reply.encode()).into());
            }
        }
        Ok(answers)
    }

    /// Sends SIGSTOP or SIGCONT to a worker by PID.
    pub fn signal(&self, worker: usize, signal: i32) -> Result<(), Error> {
        let pid = self.pid(worker) as i32;
        // SAFETY: kill(2) on the PID of a child we have not reaped.
        if unsafe { libc::kill(pid, signal) } != 0 {
            return Err(format!("kill({pid}, {signal}): {}", std::io::Error::last_os_error()).into());
        }
        Ok(())
    }

    /// Waits (`limit` at most) until the worker's process is stopped: state `T` in
    /// `/proc/PID/stat`. Returns when it saw it.
    pub async fn await_stopped(&self, worker: usize, limit: Duration) -> Result<Instant, Error> {
        let pid = self.pid(worker);
        let deadline = Instant::now() + limit;
        loop {
            if proc_state(pid)? == 'T' {
                return Ok(Instant::now());
            }
            if Instant::now() > deadline {
                return Err(format!("worker {worker} (pid {pid}) did not stop within {limit:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Closes every worker's stdin (they finish what they hold, close their sessions and exit)
    /// and waits for them; a worker that does not exit within `limit` is killed.
    pub async fn finish(&mut self, limit: Duration) -> Result<(), Error> {
        for w in &mut self.workers {
            w.stdin = None;
        }
        let deadline = Instant::now() + limit;
        let mut failed = Vec::new();
        for (index, w) in self.workers.iter_mut().enumerate() {
            loop {
                if let Some(status) = w.child.try_wait()? {
                    if !status.success() {
                        failed.push(format!("worker {index} exited with {status}"));
                    }
                    break;
                }
                if Instant::now() > deadline {
                    let _ = w.child.kill();
                    let _ = w.child.wait();
                    failed.push(format!("worker {index} did not exit within {limit:?}; killed"));
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(failed.join("; ").into())
        }
    }
}

impl Drop for Pool {
    /// Every worker still running is killed by PID (SIGKILL ends a stopped process too) and
    /// reaped.
    fn drop(&mut self) {
        for w in &mut self.workers {
            if let Ok(None) = w.child.try_wait() {
                let _ = w.child.kill();
                let _ = w.child.wait();
            }
        }
    }
}

/// The state letter of a process (`R`, `S`, `T`, `Z`, ...) from `/proc/PID/stat`.
fn proc_state(pid: u32) -> Result<char, Error> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("cannot read /proc/{pid}/stat: {e}"))?;
    // The command name is in parentheses and may hold spaces: the state follows the last ')'.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next())
        .ok_or_else(|| format!("unexpected /proc/{pid}/stat: {stat}").into())
}
