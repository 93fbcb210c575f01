//! The live "waiting for /locks/x: 3 ahead" line on stderr.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use zk_recipes::Participant;

/// Where waiting progress goes: a live line on a terminal, plain lines with `-v`, else nowhere.
#[derive(Clone, Copy)]
pub struct Progress {
    tty: bool,
    verbose: bool,
}

impl Progress {
    pub fn new(verbose: bool) -> Progress {
        Progress { tty: std::io::stderr().is_terminal(), verbose }
    }

    pub fn enabled(&self) -> bool {
        self.tty || self.verbose
    }

    fn show(&self, line: &str) {
        let mut err = std::io::stderr();
        if self.tty {
            let _ = write!(err, "\r\x1b[2K{line}");
        } else {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
    }

    /// Clears the live line.
    pub fn done(&self) {
        if self.tty {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
        }
    }

    pub fn note(&self, line: &str) {
        if self.enabled() {
            self.done();
            let _ = writeln!(std::io::stderr(), "{line}");
        }
    }

    /// Shows how many are ahead of `me` while `waiting` runs, re-reading the queue every half
    /// second (display only: the lock itself waits on one watch, herd-free).
    pub async fn while_waiting<T, F, L>(&self, what: &str, me: &str, waiting: F, list: impl Fn() -> L) -> T
    where
        F: std::future::Future<Output = T>,
        L: std::future::Future<Output = zk_recipes::Result<Vec<Participant>>>,
    {
        if !self.enabled() {
            return waiting.await;
        }
        tokio::pin!(waiting);
        let mut last = String::new();
        loop {
            tokio::select! {
                out = &mut waiting => {
                    self.done();
                    return out;
                }
                _ = tokio::time::sleep(Duration::from_millis(if last.is_empty() { 100 } else { 500 })) => {
                    if let Ok(queue) = list().await {
                        let line = match queue.iter().position(|p| p.id == me) {
                            Some(ahead) => format!("waiting for {what}: {ahead} ahead (holder: {})", queue.first().map_or("?", |p| p.id.as_str())),
                            None => format!("waiting for {what}"),
                        };
                        if line != last {
                            self.show(&line);
                            last = line;
                        }
                    }
                }
            }
        }
    }
}
