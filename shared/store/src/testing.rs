//! Test support (feature `testing`): a throwaway PostgreSQL cluster from Debian's package,
//! listening only on a Unix socket in its own temp dir (no TCP port to race for), started as
//! the unprivileged `postgres` user when the tests run as root (PostgreSQL refuses root).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A running cluster; stopped (immediately) and removed when dropped.
pub struct PgCluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_postgres: bool,
}

impl PgCluster {
    /// Starts a new cluster with database `paygate` owned by role `paygate` (trust auth on the
    /// socket). Panics with the reason when PostgreSQL is missing or does not start: a test
    /// that needs it cannot run without it.
    pub fn start() -> Self {
        let bin = bin_dir();
        let as_postgres = running_as_root();
        let dir = tempfile::Builder::new()
            .prefix("pg")
            .tempdir()
            .expect("temp dir for PostgreSQL");
        if as_postgres {
            run(Command::new("chown")
                .args(["postgres:postgres"])
                .arg(dir.path()));
        }
        let c = Self {
            dir,
            bin,
            as_postgres,
        };
        let data = c.data_dir();
        c.pg("initdb")
            .arg("-D")
            .arg(&data)
            .args(["-U", "paygate", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .status_ok();
        c.start_server();
        let socket = c.dir.path().display().to_string();
        c.pg("createdb")
            .args(["-h", &socket, "-U", "paygate", "paygate"])
            .status_ok();
        c
    }

    /// The URL of database `paygate` through the cluster's socket.
    pub fn url(&self) -> String {
        format!(
            "postgres://paygate@localhost/paygate?host={}",
            self.dir.path().display()
        )
    }

    /// Pool settings for `url` (a database of a cluster like this one) as tests use them.
    pub fn settings(url: &str) -> crate::postgres::PgSettings {
        crate::postgres::PgSettings {
            url: url.to_string(),
            pool_size: 8,
            statement_timeout: std::time::Duration::from_secs(10),
            acquire_timeout: std::time::Duration::from_secs(10),
        }
    }

    /// A new empty database of the cluster, for a test that wants its own.
    pub fn new_database(&self, name: &str) -> String {
        let socket = self.dir.path().display().to_string();
        self.pg("createdb")
            .args(["-h", &socket, "-U", "paygate", name])
            .status_ok();
        format!("postgres://paygate@localhost/{name}?host={socket}")
    }

    /// Starts the server on the cluster's data (again, after [`Self::crash`]).
    pub fn start_server(&self) {
        let socket = self.dir.path().display().to_string();
        self.pg("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(self.dir.path().join("log"))
            .arg("-o")
            .arg(format!(
                "-k {socket} -c listen_addresses='' -c fsync=off -c max_connections=200"
            ))
            .args(["-w", "start"])
            .status_ok();
    }

    /// Stops the server at once, as a crash would (every connection cut, no checkpoint).
    pub fn crash(&self) {
        self.pg("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", "immediate", "-w", "stop"])
            .status_ok();
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A PostgreSQL program, run as `postgres` when we are root.
    fn pg(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if self.as_postgres {
            let runuser = ["/usr/sbin/runuser", "/sbin/runuser"]
                .into_iter()
                .find(|p| Path::new(p).exists())
                .unwrap_or("runuser");
            let mut c = Command::new(runuser);
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        // Quietly: the server may be stopped already.
        let _ = self
            .pg("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

trait StatusOk {
    fn status_ok(&mut self);
}

impl StatusOk for Command {
    fn status_ok(&mut self) {
        run(self);
    }
}

fn run(c: &mut Command) {
    let out = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
    assert!(
        out.status.success(),
        "{c:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// `PAYGATE_TEST_PG_BIN`, else the newest `/usr/lib/postgresql/*/bin` (Debian's layout).
fn bin_dir() -> PathBuf {
    if let Ok(p) = std::env::var("PAYGATE_TEST_PG_BIN") {
        return PathBuf::from(p);
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            Path::new(&bin).join("initdb").exists().then_some((v, bin))
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, p)| p)
        .expect("PostgreSQL is not installed (make installs Debian's postgresql)")
}
