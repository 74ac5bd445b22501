//! `[USER@]HOST:PATH` locations: log in with ssh, start `tern serve --once`
//! there, and read the once line it prints back through the channel.
//!
//! ssh authenticates the host and the user; tern then trusts the once line
//! that came through it (the server's fingerprint is pinned, no
//! `known_hosts` prompt) and moves the data over its own TCP connections.
//! The ssh process stays up for the whole session — its closing tells the
//! remote tern the client went away — and is reaped afterwards. ssh's
//! stderr is kept, so that a failed login or a missing remote tern is
//! reported in ssh's own words.

use std::collections::VecDeque;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tern_engine::client::Endpoint;
use tern_proto::OnceLine;
use tern_proto::once::{MAX_ONCE_LINE, ONCE_MAGIC};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

use crate::cli::SshArgs;
use crate::error::{Retry, SshFailure};
use crate::location::SshTarget;

/// Lines a login may print on stdout before the once line (motd, rc files).
const MAX_NOISE_LINES: usize = 200;
/// Lines of the remote's stderr kept for error messages.
const KEPT_STDERR_LINES: usize = 20;
/// The remote tern's option to listen on every address (multi-path).
pub const EVERY_ADDRESS: &str = "--every-address";

/// The option that has a reverse-mode remote tern dial this host's other
/// addresses too.
pub const CONNECT_PATHS: &str = "--connect-paths";

/// How long ssh may take to end once its session is over.
const REAP_WAIT: Duration = Duration::from_secs(10);

fn failure(message: String, retry: Retry) -> SshFailure {
    SshFailure::new(message, retry)
}

/// How to start the remote tern.
#[derive(Debug, Clone)]
pub struct SshOptions {
    /// The ssh program and its options.
    command: Vec<String>,
    /// The tern program on the remote host.
    remote_tern: String,
    /// Wait this long for the once line, login included.
    timeout: Duration,
    /// The remote tern applies and sends set-user-ID, set-group-ID and
    /// sticky bits (`cp --keep-special-bits`: the same user at both ends
    /// asked for them).
    pub allow_special_bits: bool,
    /// The user's `--fingerprint`: the once line must announce this one
    /// (checked even with `--ca`, which has nothing to say over ssh).
    pub expected_fingerprint: Option<String>,
    /// The remote tern listens on every address and names its others, so
    /// that the streams can take every path (`serve --every-address`).
    pub every_address: bool,
    /// In reverse mode: this host's other addresses the remote tern dials
    /// too, one path each (`ADDR` or `ADDR@FROM`, `serve --connect-paths`).
    pub connect_paths: Vec<String>,
}

impl SshOptions {
    /// From the command line; why not, when `--ssh` is unusable.
    pub fn from_args(args: &SshArgs) -> Result<SshOptions, String> {
        let command = shell_words::split(&args.command)
            .map_err(|e| format!("--ssh '{}': {e}", args.command))?;
        if command.is_empty() {
            return Err("--ssh is empty".into());
        }
        Ok(SshOptions {
            command,
            remote_tern: args.remote_tern.clone(),
            timeout: Duration::from_secs_f64(args.ssh_timeout),
            allow_special_bits: false,
            expected_fingerprint: None,
            every_address: false,
            connect_paths: Vec::new(),
        })
    }
}

/// The last lines of a stream, kept while it is read.
#[derive(Debug, Clone, Default)]
struct Tail(Arc<Mutex<VecDeque<String>>>);

impl Tail {
    fn push(&self, line: String) {
        let mut lines = self.0.lock().expect("tail");
        if lines.len() == KEPT_STDERR_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    fn text(&self) -> String {
        let lines = self.0.lock().expect("tail");
        lines
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A `tern serve --once` running at the far end of an ssh session.
#[derive(Debug)]
pub struct Remote {
    child: Child,
    /// Held open for the whole session; closing it tells the remote tern
    /// that the client is gone.
    stdin: Option<ChildStdin>,
    stderr: Tail,
    drains: Vec<tokio::task::JoinHandle<()>>,
    target: SshTarget,
    /// What the remote tern printed.
    pub line: OnceLine,
}

impl Remote {
    /// Logs in and starts `tern serve --once` (with `--connect :PORT` when
    /// `connect_back` is given: it then dials this side's PORT), and reads
    /// its once line.
    pub async fn start(
        target: &SshTarget,
        opts: &SshOptions,
        connect_back: Option<u16>,
    ) -> Result<Remote, SshFailure> {
        let mut child = spawn(target, opts, connect_back)?;
        let stderr = Tail::default();
        let mut drains = Vec::new();
        if let Some(err) = child.stderr.take() {
            let (tail, host) = (stderr.clone(), target.host.clone());
            drains.push(tokio::spawn(async move {
                let mut lines = BufReader::new(err).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::info!("{host}: {line}");
                    tail.push(line);
                }
            }));
        }
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let mut remote = Remote {
            child,
            stdin,
            stderr,
            drains,
            target: target.clone(),
            line: OnceLine {
                port: None,
                addr: None,
                token: [0; 16],
                fingerprint: String::new(),
            },
        };
        let mut lines = BufReader::new(stdout);
        let read = tokio::time::timeout(opts.timeout, read_once_line(&mut lines)).await;
        match read {
            Ok(Ok(Some(line))) => {
                remote.line = line;
                // Whatever else comes on stdout is not ours; keep the pipe
                // drained so the remote never blocks on it.
                remote.drains.push(tokio::spawn(async move {
                    let mut rest = lines.lines();
                    while let Ok(Some(l)) = rest.next_line().await {
                        tracing::debug!("remote stdout: {l}");
                    }
                }));
                Ok(remote)
            }
            Ok(Ok(None)) => Err(remote.explain_exit(opts).await),
            Ok(Err(bad)) => {
                let said = remote.stop().await.1;
                Err(failure(
                    format!(
                        "the tern on {} answered with a line this tern cannot read ({bad}); \
                         are the two versions compatible?{}",
                        target.host,
                        quoted(&said)
                    ),
                    Retry::Futile,
                ))
            }
            Err(_) => {
                let said = remote.stop().await.1;
                Err(failure(
                    format!(
                        "no answer from tern on {} within {:?} (is ssh waiting for a password? \
                         use key authentication){}",
                        target.host,
                        opts.timeout,
                        quoted(&said)
                    ),
                    Retry::May,
                ))
            }
        }
    }

    /// Why the remote ended without a once line, from ssh's exit status and
    /// words.
    async fn explain_exit(self, opts: &SshOptions) -> SshFailure {
        let host = self.target.host.clone();
        let (status, said) = self.stop().await;
        let said_q = quoted(&said);
        match status.and_then(|s| s.code()) {
            Some(255) => failure(format!("ssh to {host} failed{said_q}"), Retry::May),
            Some(127) | Some(126) => failure(
                format!(
                    "'{}' could not be run on {host}{said_q}\n\
                     Install tern there, or give its path with --remote-tern PATH.",
                    opts.remote_tern
                ),
                Retry::Futile,
            ),
            Some(code) => failure(
                format!(
                    "'{} serve --once' failed on {host} (exit {code}){said_q}",
                    opts.remote_tern
                ),
                Retry::Futile,
            ),
            None => failure(
                format!("ssh to {host} ended without an answer from tern{said_q}"),
                Retry::May,
            ),
        }
    }

    /// Where the data connections go: the host as the user named it, or,
    /// when that name does not resolve here (an ssh alias), the address the
    /// remote saw ssh arrive on. The port is the once line's (0 in reverse
    /// mode, where nothing is dialled).
    pub async fn endpoint(&self) -> Endpoint {
        let port = self.line.port.unwrap_or(0);
        let host = &self.target.host;
        let resolves = tokio::net::lookup_host((host.as_str(), port)).await.is_ok();
        let host = match (resolves, self.line.addr) {
            (false, Some(addr)) => {
                tracing::info!("{host} does not resolve here; using {addr} from the remote");
                addr.to_string()
            }
            _ => host.clone(),
        };
        Endpoint { host, port }
    }

    /// Completes when ssh has ended (the remote tern with it).
    pub async fn ended(&mut self) {
        let _ = self.child.wait().await;
    }

    /// Closes the session: closes ssh's stdin (the remote tern exits if it
    /// has not yet), waits for ssh to end (killing it after a while), and
    /// returns what the remote said on stderr.
    pub async fn finish(self) -> String {
        self.stop().await.1
    }

    async fn stop(mut self) -> (Option<ExitStatus>, String) {
        drop(self.stdin.take());
        let status = match tokio::time::timeout(REAP_WAIT, self.child.wait()).await {
            Ok(Ok(s)) => Some(s),
            Ok(Err(e)) => {
                tracing::warn!("waiting for ssh: {e}");
                None
            }
            Err(_) => {
                tracing::warn!("ssh did not end within {REAP_WAIT:?}; killing it");
                let _ = self.child.kill().await;
                None
            }
        };
        for d in self.drains.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(1), d).await;
        }
        (status, self.stderr.text())
    }
}

/// Runs ssh to start `tern serve --once` on `target` (with `--connect
/// :PORT` when `connect_back` is given), its stdio piped here.
fn spawn(
    target: &SshTarget,
    opts: &SshOptions,
    connect_back: Option<u16>,
) -> Result<Child, SshFailure> {
    let mut remote = vec![opts.remote_tern.clone(), "serve".into(), "--once".into()];
    if let Some(port) = connect_back {
        remote.extend(["--connect".into(), format!(":{port}")]);
        if !opts.connect_paths.is_empty() {
            remote.extend([CONNECT_PATHS.into(), opts.connect_paths.join(",")]);
        }
    }
    if opts.allow_special_bits {
        remote.push("--allow-special-bits".into());
    }
    if opts.every_address && connect_back.is_none() {
        remote.push(EVERY_ADDRESS.into());
    }
    let mut cmd = Command::new(&opts.command[0]);
    cmd.args(&opts.command[1..])
        .arg(target.destination())
        // ssh hands the remote shell one string; quote for it.
        .arg(shell_words::join(&remote))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    tracing::debug!("running {:?}", cmd.as_std());
    cmd.spawn().map_err(|e| {
        failure(
            format!(
                "cannot run the ssh command '{}': {e} (choose another with --ssh)",
                opts.command[0]
            ),
            Retry::Futile,
        )
    })
}

fn quoted(said: &str) -> String {
    let said = said.trim();
    if said.is_empty() {
        String::new()
    } else {
        format!(":\n  {}", said.replace('\n', "\n  "))
    }
}

/// Reads stdout up to the once line, skipping what a login prints first.
/// `Ok(None)` when stdout ended first.
async fn read_once_line<R: AsyncRead + Unpin>(
    out: &mut BufReader<R>,
) -> Result<Option<OnceLine>, String> {
    let mut buf = Vec::new();
    for _ in 0..MAX_NOISE_LINES {
        buf.clear();
        let n = (&mut *out)
            .take(MAX_ONCE_LINE as u64 + 2)
            .read_until(b'\n', &mut buf)
            .await
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok(None);
        }
        let text = String::from_utf8_lossy(&buf);
        if text.starts_with(&format!("{ONCE_MAGIC} ")) {
            return OnceLine::decode(&text).map(Some).map_err(|e| e.to_string());
        }
        tracing::debug!("remote stdout before the once line: {}", text.trim_end());
    }
    Err(format!(
        "no once line among the first {MAX_NOISE_LINES} lines"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read(text: &str) -> Result<Option<OnceLine>, String> {
        read_once_line(&mut BufReader::new(text.as_bytes())).await
    }

    #[tokio::test]
    async fn the_once_line_is_found_after_login_noise() {
        let line = OnceLine {
            port: Some(4000),
            addr: None,
            token: [9; 16],
            fingerprint: "SHA256:x".into(),
        };
        let text = format!("Welcome!\n\nTERN-ONCEfoo\n{}\nlater\n", line.encode());
        assert_eq!(read(&text).await.unwrap(), Some(line));
        assert_eq!(read("motd\n").await.unwrap(), None);
        assert!(read("TERN-ONCE 9 port=1\n").await.is_err());
        let long = format!("{ONCE_MAGIC} 1 {}\n", "x".repeat(2 * MAX_ONCE_LINE));
        assert!(read(&long).await.is_err());
        assert!(read(&"noise\n".repeat(MAX_NOISE_LINES + 1)).await.is_err());
    }

    #[test]
    fn the_ssh_command_is_split_like_a_shell_would() {
        let args = SshArgs {
            command: "ssh -p 2222 -o 'ProxyJump=a b'".into(),
            remote_tern: "tern".into(),
            reverse_connect: false,
            ssh_timeout: 5.0,
        };
        let o = SshOptions::from_args(&args).unwrap();
        assert_eq!(o.command, ["ssh", "-p", "2222", "-o", "ProxyJump=a b"]);
        for bad in ["", "ssh 'unclosed"] {
            let args = SshArgs {
                command: bad.into(),
                ..args.clone()
            };
            assert!(SshOptions::from_args(&args).is_err(), "{bad:?}");
        }
    }
}
