//! A child process that speaks the peers' line protocol on stdin/stdout.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub struct Driver {
    child: Child,
    lines: mpsc::Receiver<String>,
    name: String,
}

impl Driver {
    pub fn spawn(name: &str, mut cmd: Command) -> Result<Driver, String> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{name}: cannot start: {e}"))?;
        let out = child.stdout.take().ok_or("no stdout")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Ok(Driver { child, lines, name: name.to_string() })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next line starting with `prefix`, other lines skipped.
    pub fn expect(&mut self, prefix: &str) -> Result<String, String> {
        Ok(self.lines_until(prefix)?.pop().unwrap_or_default())
    }

    /// Every line up to and including the next one starting with `prefix` (the last).
    pub fn lines_until(&mut self, prefix: &str) -> Result<Vec<String>, String> {
        let mut lines = Vec::new();
        loop {
            match self.lines.recv_timeout(Duration::from_secs(180)) {
                Ok(line) => {
                    let last = line.starts_with(prefix);
                    lines.push(line);
                    if last {
                        return Ok(lines);
                    }
                }
                Err(_) => return Err(format!("{}: no {prefix:?} line (exited or hung)", self.name)),
            }
        }
    }

    pub fn say(&mut self, word: &str) {
        if let Some(stdin) = self.child.stdin.as_mut() {
            let _ = writeln!(stdin, "{word}");
            let _ = stdin.flush();
        }
    }

    /// Says `exit` and waits for the process.
    pub fn finish(mut self) -> Result<(), String> {
        self.say("exit");
        drop(self.child.stdin.take());
        let status = self.child.wait().map_err(|e| e.to_string())?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("{} exited with {status}", self.name))
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
