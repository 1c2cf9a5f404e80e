//! A child process owned by a test: output to a log file, signals, bounded waits, kill on drop.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::wait::try_poll_until;

/// A running child; SIGKILLed on drop so a failed test leaves nothing behind.
#[derive(Debug)]
pub struct ChildProc {
    what: String,
    child: Child,
    pid: u32,
    log: PathBuf,
}

impl ChildProc {
    /// Spawns `cmd` with stdin closed and stdout + stderr appended to `log`.
    /// `what` names it in panic messages.
    pub fn spawn(what: &str, mut cmd: Command, log: &Path) -> ChildProc {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap_or_else(|e| panic!("open log {}: {e}", log.display()));
        let err = file.try_clone().expect("clone a log file handle");
        cmd.stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .kill_on_drop(true);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        let pid = child.id().expect("a just-spawned child has a pid");
        ChildProc {
            what: what.to_owned(),
            child,
            pid,
            log: log.to_owned(),
        }
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Where its stdout and stderr go.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The log so far (empty if unreadable).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `Some(status)` once the child has exited (reaps it), `None` while it runs.
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Sends `signal` (e.g. `libc::SIGTERM`).
    pub fn signal(&self, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(self.pid).expect("pid fits pid_t");
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own unreaped child,
        // so it cannot have been recycled for another process.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::kill(pid, signal) };
        if rc != 0 {
            panic!(
                "kill({pid}, {signal}) on {}: {}",
                self.what,
                std::io::Error::last_os_error()
            );
        }
    }

    /// Waits for the child to exit; panics with its log after `deadline`.
    pub async fn wait_exit(&mut self, deadline: Duration) -> ExitStatus {
        match tokio::time::timeout(deadline, self.child.wait()).await {
            Ok(Ok(status)) => status,
            Ok(Err(e)) => panic!("wait for {}: {e}", self.what),
            Err(_) => panic!(
                "{} (pid {}) still running after {deadline:?}; log:\n{}",
                self.what,
                self.pid,
                self.log()
            ),
        }
    }

    /// A `kB` field of `/proc/PID/status` (`VmRSS`, `VmHWM`, ...) in KiB; panics if absent.
    pub fn status_kib(&self, field: &str) -> u64 {
        let path = format!("/proc/{}/status", self.pid);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
        status_field(&text, field)
            .and_then(|v| v.trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no numeric {field} in {path}"))
    }

    /// Open file descriptors (sockets included), to catch leaks.
    pub fn open_fds(&self) -> usize {
        let dir = format!("/proc/{}/fd", self.pid);
        std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("read {dir}: {e}"))
            .count()
    }

    /// Threads, from `/proc/PID/status`.
    pub fn threads(&self) -> u64 {
        let path = format!("/proc/{}/status", self.pid);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
        status_field(&text, "Threads")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no Threads in {path}"))
    }

    /// CPU time used so far (utime + stime, see [`cpu_time_of`]).
    pub fn cpu_time(&self) -> Duration {
        cpu_time_of(self.pid).unwrap_or_else(|| panic!("no CPU times in /proc/{}/stat", self.pid))
    }

    /// Sets the soft limit on open files of the running process (`prlimit(2)`; root or the
    /// same user), keeping its hard limit; returns the soft limit it had.
    pub fn set_open_files_limit(&self, soft: u64) -> u64 {
        let mut old = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let pid = libc::pid_t::try_from(self.pid).expect("a pid fits");
        // SAFETY: reads the limit into `old`, a valid rlimit for the duration of the call.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, std::ptr::null(), &mut old) };
        assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
        let new = libc::rlimit {
            rlim_cur: soft,
            rlim_max: old.rlim_max,
        };
        // SAFETY: `new` is a valid rlimit for the duration of the call; no old value is read.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &new, std::ptr::null_mut()) };
        assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
        old.rlim_cur
    }

    /// Polls until the log contains `needle`; panics with the log on timeout.
    pub async fn wait_for_log(&self, needle: &str, deadline: Duration) {
        let found = try_poll_until(deadline, || async {
            self.log().contains(needle).then_some(())
        });
        if found.await.is_none() {
            panic!(
                "{} log never contained {needle:?} within {deadline:?}:\n{}",
                self.what,
                self.log()
            );
        }
    }
}

/// CPU time process `pid` used so far: utime + stime from `/proc/PID/stat`, at the clock
/// tick's grain; `None` when the process is gone or the file is not as expected.
pub fn cpu_time_of(pid: u32) -> Option<Duration> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the `)` that ends the command name start at state (field 3).
    let fields: Vec<&str> = text.rsplit_once(')')?.1.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    // SAFETY: sysconf only reads a configuration value.
    #[allow(unsafe_code)]
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(Duration::from_secs_f64(
        (field(14)? + field(15)?) as f64 / tick as f64,
    ))
}

fn status_field<'a>(text: &'a str, field: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}
