//! What `zklock top` needs of the terminal it owns: its width, single keys without Enter (`q`),
//! and quiet on stderr while the view is on the screen. Everything is put back on drop.

use std::io::IsTerminal;
use std::os::fd::AsRawFd;

/// The width of the terminal on stdout, if stdout is one.
pub fn width() -> Option<usize> {
    let stdout = std::io::stdout();
    if !stdout.is_terminal() {
        return None;
    }
    // SAFETY: TIOCGWINSZ fills a `winsize` we own; a failure leaves it zeroed.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(stdout.as_raw_fd(), libc::TIOCGWINSZ, &mut size) } == 0;
    (ok && size.ws_col > 0).then_some(size.ws_col as usize)
}

/// The terminal on stdin in non-canonical mode without echo (keys arrive one by one, Ctrl-C
/// still interrupts), and stderr sent to /dev/null when it is the terminal the view draws on:
/// log lines would tear the frame. Both restored when dropped.
pub struct Owned {
    termios: Option<libc::termios>,
    stderr: Option<libc::c_int>,
}

impl Owned {
    pub fn take() -> Owned {
        let mut owned = Owned { termios: None, stderr: None };
        if std::io::stdin().is_terminal() {
            // SAFETY: tcgetattr/tcsetattr on fd 0 with a termios we own.
            unsafe {
                let mut t: libc::termios = std::mem::zeroed();
                if libc::tcgetattr(0, &mut t) == 0 {
                    let saved = t;
                    t.c_lflag &= !(libc::ICANON | libc::ECHO);
                    t.c_cc[libc::VMIN] = 1;
                    t.c_cc[libc::VTIME] = 0;
                    if libc::tcsetattr(0, libc::TCSANOW, &t) == 0 {
                        owned.termios = Some(saved);
                    }
                }
            }
        }
        if std::io::stderr().is_terminal() && std::io::stdout().is_terminal() {
            // SAFETY: dup/open/dup2 on descriptors we own; the copy restores stderr on drop.
            unsafe {
                let saved = libc::dup(2);
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
                if saved >= 0 && null >= 0 && libc::dup2(null, 2) >= 0 {
                    owned.stderr = Some(saved);
                }
                if null >= 0 {
                    libc::close(null);
                }
            }
        }
        owned
    }

    /// Whether keys can be read (stdin is a terminal we set up).
    pub fn keys(&self) -> bool {
        self.termios.is_some()
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: restoring what `take` saved.
        unsafe {
            if let Some(t) = self.termios {
                libc::tcsetattr(0, libc::TCSANOW, &t);
            }
            if let Some(fd) = self.stderr {
                libc::dup2(fd, 2);
                libc::close(fd);
            }
        }
    }
}

/// Resolves when `q` (or `Q`) is typed on stdin; never when stdin ends or fails.
pub async fn quit_key() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        use std::io::Read;
        let mut byte = [0u8; 1];
        let mut stdin = std::io::stdin();
        while let Ok(1) = stdin.read(&mut byte) {
            if byte[0] == b'q' || byte[0] == b'Q' {
                let _ = tx.send(());
                return;
            }
        }
        // Keep the sender alive: no key will come.
        std::mem::forget(tx);
    });
    let _ = rx.await;
}
