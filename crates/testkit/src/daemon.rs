//! tern server processes started for a test.
//!
//! [`Serve`] says how to start `tern serve` (binary, root, state
//! directory, listen address, grace, more flags, a command prefix such as
//! `netlab --lab L exec B` to run it elsewhere); [`Serve::start`] runs it
//! with `--json` and reads the one JSON line it prints once it listens
//! (its [`Banner`]: `{"listen", "root", "fingerprint", "authz_rules",
//! "http"?}`). A fixed port is tried again for a few seconds while another
//! socket holds it (a restart on the port of a daemon just killed).
//!
//! The [`Daemon`] it gives keeps its stderr in a log file (a busy daemon
//! never blocks on a full pipe; restarts append), can be killed with
//! SIGKILL and started again on its port with the same root and state (so
//! the same certificate), stopped with SIGTERM, and is killed when
//! dropped. [`Daemon::spawn`] does the same for any command that prints a
//! JSON banner (`tern advisor --json`).
//!
//! Tests of the `tern` package pass `env!("CARGO_BIN_EXE_tern")`; other
//! crates' tests find the binary with [`tern_bin`].

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use serde_json::Value;

/// The `tern` binary for tests outside the `tern` package (which cannot
/// use `CARGO_BIN_EXE_tern`): `TERN_BIN` if set; else the one cargo built
/// in the test's own profile directory (`target/PROFILE/tern` for the
/// test `target/PROFILE/deps/NAME-HASH`, so the profile under test and
/// any `CARGO_TARGET_DIR`: `cargo test --workspace` builds it, or `cargo
/// build -p tern`); else `target/release/tern` or `target/debug/tern` of
/// this workspace. `None` when there is none.
pub fn tern_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TERN_BIN").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let beside = std::env::current_exe().ok().and_then(|exe| {
        // target/PROFILE/deps/TEST-HASH
        let profile = exe.parent()?.parent()?;
        Some(profile.join("tern"))
    });
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    beside
        .into_iter()
        .chain(["release", "debug"].map(|p| workspace.join(p).join("tern")))
        .find(|p| p.is_file())
}

/// Sends `signal` (a name such as `KILL` or `TERM`) to process `pid`.
pub fn signal(pid: u32, signal: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -{signal} {pid}");
}

/// What a tern server printed on its first line of stdout under `--json`.
#[derive(Debug, Clone)]
pub struct Banner {
    /// `listen`: the address the daemon bound (`tern serve`).
    pub listen: Option<SocketAddr>,
    /// `root`: the directory it serves.
    pub root: Option<PathBuf>,
    /// `fingerprint`: its certificate's, `SHA256:…`.
    pub fingerprint: Option<String>,
    /// `authz_rules`: the number of authorization rules in site mode
    /// (`null`, so `None`, otherwise).
    pub authz_rules: Option<u64>,
    /// `http`: where its advisor's HTTP API listens (`--http`).
    pub http: Option<SocketAddr>,
    /// The whole line, parsed.
    pub json: Value,
}

impl Banner {
    /// Parses a banner line; panics saying what is wrong with it.
    pub fn parse(line: &str) -> Banner {
        let json: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("the banner is not one JSON object ({e}): {line:?}"));
        assert!(
            json.is_object(),
            "the banner is not a JSON object: {line:?}"
        );
        let addr = |key: &str| {
            json.get(key).and_then(Value::as_str).map(|a| {
                a.parse()
                    .unwrap_or_else(|e| panic!("{key} {a:?} is not an address ({e}): {line}"))
            })
        };
        Banner {
            listen: addr("listen"),
            http: addr("http"),
            root: json.get("root").and_then(Value::as_str).map(PathBuf::from),
            fingerprint: json
                .get("fingerprint")
                .and_then(Value::as_str)
                .map(String::from),
            authz_rules: json.get("authz_rules").and_then(Value::as_u64),
            json,
        }
    }
}

/// How to start `tern serve` for a test; [`Serve::start`] starts it.
#[derive(Debug, Clone)]
pub struct Serve {
    tern: PathBuf,
    via: Vec<OsString>,
    listen: String,
    root: PathBuf,
    state: PathBuf,
    grace: Option<u32>,
    args: Vec<OsString>,
    log: PathBuf,
}

impl Serve {
    /// `TERN serve --listen 127.0.0.1:0 --root ROOT --state-dir STATE`,
    /// its stderr appended to `STATE.log` (the state directory's name
    /// with `.log`, beside it).
    pub fn new(tern: impl AsRef<Path>, root: impl AsRef<Path>, state: impl AsRef<Path>) -> Serve {
        let state = state.as_ref().to_path_buf();
        let log = state.with_file_name(format!(
            "{}.log",
            state
                .file_name()
                .expect("a state directory with a name")
                .to_string_lossy()
        ));
        Serve {
            tern: tern.as_ref().to_path_buf(),
            via: Vec::new(),
            listen: "127.0.0.1:0".into(),
            root: root.as_ref().to_path_buf(),
            state,
            grace: None,
            args: Vec::new(),
            log,
        }
    }

    /// Listens on `addr` (`HOST:PORT`, `[V6]:PORT`; port 0 for any).
    pub fn listen(mut self, addr: &str) -> Serve {
        self.listen = addr.into();
        self
    }

    /// Listens on `127.0.0.1:port`.
    pub fn port(self, port: u16) -> Serve {
        self.listen(&format!("127.0.0.1:{port}"))
    }

    /// `--grace SECS`: how long sessions may finish after SIGTERM.
    pub fn grace(mut self, secs: u32) -> Serve {
        self.grace = Some(secs);
        self
    }

    /// One more argument after the usual ones.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Serve {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// More arguments after the usual ones.
    pub fn args<I, S>(mut self, args: I) -> Serve
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Appends its stderr to `path` instead of `STATE.log`.
    pub fn log(mut self, path: impl AsRef<Path>) -> Serve {
        self.log = path.as_ref().to_path_buf();
        self
    }

    /// Runs it through `prefix` (a program and its arguments, such as
    /// `netlab --lab L exec B`, which must end in an `exec` of tern so
    /// that signals reach the daemon).
    pub fn via<I, S>(mut self, prefix: I) -> Serve
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.via = prefix.into_iter().map(|a| a.as_ref().to_owned()).collect();
        self
    }

    /// The root it serves.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Its state directory (certificate and key).
    pub fn state(&self) -> &Path {
        &self.state
    }

    /// The command [`Serve::start`] runs, `--json` included, with no
    /// standard streams set: for a test that runs it to see it refuse
    /// its options (`.output()`).
    pub fn command(&self) -> Command {
        let mut c = match self.via.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(&self.tern);
                c
            }
            None => Command::new(&self.tern),
        };
        c.args(["serve", "--json", "--listen", &self.listen]);
        if let Some(g) = self.grace {
            c.args(["--grace", &g.to_string()]);
        }
        c.arg("--root")
            .arg(&self.root)
            .arg("--state-dir")
            .arg(&self.state)
            .args(&self.args);
        c
    }

    /// Starts the daemon and waits for its banner; panics with its log if
    /// it does not start. A fixed port is tried again for up to 5 s while
    /// another socket holds it.
    pub fn start(self) -> Daemon {
        let mut tries = if self.listen.ends_with(":0") { 1 } else { 50 };
        loop {
            match Daemon::try_spawn(self.command(), &self.log) {
                Ok(mut d) => {
                    assert!(
                        d.banner.listen.is_some()
                            && d.banner
                                .fingerprint
                                .as_ref()
                                .is_some_and(|f| f.starts_with("SHA256:")),
                        "tern serve's banner lacks its address or fingerprint: {}",
                        d.banner.json
                    );
                    d.serve = Some(self);
                    return d;
                }
                Err(log) => {
                    tries -= 1;
                    assert!(
                        tries > 0,
                        "tern serve --listen {} did not start: {log}",
                        self.listen
                    );
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }
}

/// A tern server started for a test: killed when dropped.
#[derive(Debug)]
pub struct Daemon {
    /// The process (under [`Serve::via`], the prefix that exec'd tern).
    pub child: Child,
    /// What it printed on start.
    pub banner: Banner,
    /// Where its stderr goes.
    pub log: PathBuf,
    serve: Option<Serve>,
}

impl Daemon {
    /// Starts `cmd`, which prints one JSON line once it serves (it must
    /// have `--json`), with its stderr appended to `log`; reads that line.
    /// Panics with the log if the process ends without one.
    pub fn spawn(cmd: Command, log: &Path) -> Daemon {
        let shown = format!("{cmd:?}");
        Daemon::try_spawn(cmd, log).unwrap_or_else(|log| panic!("{shown} did not start: {log}"))
    }

    /// [`Daemon::spawn`], or what was logged when no banner came.
    fn try_spawn(mut cmd: Command, log: &Path) -> Result<Daemon, String> {
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap_or_else(|e| panic!("open {}: {e}", log.display()));
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
        let mut line = String::new();
        let read = BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
        if read.is_err() || line.trim().is_empty() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::fs::read_to_string(log).unwrap_or_default());
        }
        Ok(Daemon {
            child,
            banner: Banner::parse(line.trim_end()),
            log: log.to_path_buf(),
            serve: None,
        })
    }

    /// The address it listens on (the banner's `listen`).
    pub fn addr(&self) -> SocketAddr {
        self.banner
            .listen
            .unwrap_or_else(|| panic!("no listen address in {}", self.banner.json))
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.addr().port()
    }

    /// Its certificate's fingerprint.
    pub fn fingerprint(&self) -> &str {
        self.banner
            .fingerprint
            .as_deref()
            .unwrap_or_else(|| panic!("no fingerprint in {}", self.banner.json))
    }

    /// `tern://ADDR/PATH` (`ADDR` as it listens: `127.0.0.1:PORT`,
    /// `[::1]:PORT`).
    pub fn url(&self, path: &str) -> String {
        format!("tern://{}/{path}", self.addr())
    }

    /// `http://ADDR` of its advisor (the banner's `http`).
    pub fn http_url(&self) -> String {
        let http = self
            .banner
            .http
            .unwrap_or_else(|| panic!("no http address in {}", self.banner.json));
        format!("http://{http}")
    }

    /// The root it serves.
    pub fn root(&self) -> &Path {
        self.serve().root()
    }

    /// Its state directory.
    pub fn state(&self) -> &Path {
        self.serve().state()
    }

    fn serve(&self) -> &Serve {
        self.serve
            .as_ref()
            .expect("a daemon started from a Serve (not Daemon::spawn)")
    }

    /// What it (and whatever ran with its log before) logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Kills it with SIGKILL and waits for it; returns how to start it
    /// again on the same address, root and state (so the same
    /// certificate).
    pub fn kill9(mut self) -> Serve {
        signal(self.child.id(), "KILL");
        let _ = self.child.wait();
        let addr = self.addr().to_string();
        self.serve
            .take()
            .expect("a daemon started from a Serve (not Daemon::spawn)")
            .listen(&addr)
    }

    /// [`Daemon::kill9`] and start it again at once.
    pub fn kill9_and_restart(self) -> Daemon {
        self.kill9().start()
    }

    /// Stops it with SIGTERM; returns how it exited and its log.
    pub fn stop(mut self) -> (ExitStatus, String) {
        signal(self.child.id(), "TERM");
        let status = self.child.wait().unwrap();
        (status, self.log_text())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A process killed (SIGKILL) and reaped when the test ends, also when it
/// fails: a daemon, an advisor, a server tool run for the test.
#[derive(Debug)]
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn banners_of_serve_and_advisor_parse() {
        let b = Banner::parse(
            r#"{"listen":"127.0.0.1:4747","root":"/srv","fingerprint":"SHA256:x","authz_rules":null}"#,
        );
        assert_eq!(b.listen, Some("127.0.0.1:4747".parse().unwrap()));
        assert_eq!(b.root.as_deref(), Some(Path::new("/srv")));
        assert_eq!(b.fingerprint.as_deref(), Some("SHA256:x"));
        assert_eq!((b.authz_rules, b.http), (None, None));
        let b = Banner::parse(
            r#"{"listen":"[::1]:1","root":"r","fingerprint":"f","authz_rules":4,"http":"127.0.0.1:8"}"#,
        );
        assert_eq!(b.listen.unwrap().to_string(), "[::1]:1");
        assert_eq!(b.authz_rules, Some(4));
        assert_eq!(b.http, Some("127.0.0.1:8".parse().unwrap()));
        let b = Banner::parse(r#"{"http":"127.0.0.1:9","db":"a.db"}"#);
        assert_eq!((b.listen, b.http.map(|h| h.port())), (None, Some(9)));
        assert_eq!(b.json["db"], "a.db");
    }

    #[test]
    fn a_serve_command_has_json_and_its_flags() {
        let s = Serve::new("/bin/tern", "/r", "/tmp/x/state")
            .port(5)
            .grace(1)
            .arg("--no-udp-probe")
            .via(["netlab", "exec", "B"]);
        let c = s.command();
        let args: Vec<_> = c
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(c.get_program(), "netlab");
        assert_eq!(
            args,
            [
                "exec",
                "B",
                "/bin/tern",
                "serve",
                "--json",
                "--listen",
                "127.0.0.1:5",
                "--grace",
                "1",
                "--root",
                "/r",
                "--state-dir",
                "/tmp/x/state",
                "--no-udp-probe"
            ]
        );
        assert_eq!(s.log, Path::new("/tmp/x/state.log"));
    }
}
