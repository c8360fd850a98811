//! Test harness: runs the real `paygate` binary with a temp data dir on loopback port 0, reads
//! the addresses it bound back from `paygate.addr`, and offers small helpers for the admin and
//! management APIs.
#![allow(dead_code)]

mod api;
pub mod chain;
pub mod channel;
pub mod cluster;
pub mod crash;
pub mod escrow;
pub mod permit2;
pub mod upstream;
pub mod webhook_receiver;
pub mod windows;

use reqwest::{Client, Response};
use serde_json::{json, Value};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const ADMIN_TOKEN: &str = "test-admin-token";
pub const WALLET_A: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
pub const WALLET_B: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";

/// A loopback port nothing listens on (for "unreachable" addresses; never handed to a server).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A running gateway process. Stopped (SIGTERM, then SIGKILL) on drop.
pub struct Gateway {
    pub base: String,
    /// The public port (chosen by the binary at first start, kept across restarts).
    pub port: u16,
    /// The sandbox payout provider's address, once started.
    pub sandbox: Option<String>,
    pub dir: tempfile::TempDir,
    pub http: Client,
    extra_env: Vec<(String, String)>,
    child: Option<Child>,
    /// The next start takes over from the running process (`serve --upgrade`).
    upgrading: bool,
    /// The gateway's own PostgreSQL cluster when the suite runs on that backend
    /// (`PAYGATE_TEST_BACKEND=postgres`); it outlives restarts of the gateway.
    _pg: Option<paygate_store::testing::PgCluster>,
    /// The database the gateway uses, when on PostgreSQL (its own, or a cluster's shared one).
    database_url: Option<String>,
    /// The local chain the gateway settles on, when the harness gave it one (a route can only
    /// be created on a network the deployment settles); shared by a cluster's nodes.
    chain: Option<std::sync::Arc<chain::Chain>>,
    /// The environment settling on that chain (the test's own environment overrides it).
    chain_env: Vec<(String, String)>,
}

/// Whether `env` chooses how the gateway settles (a relayer key or a facilitator kind): the
/// harness then gives it no chain of its own.
fn settles_by_itself(env: &[(&str, &str)]) -> bool {
    env.iter()
        .any(|(k, _)| *k == "PAYGATE_RELAYER_KEY" || *k == "PAYGATE__FACILITATOR__KIND")
}

/// Whether this run of the suite puts gateways on PostgreSQL (`make test` runs the end-to-end
/// suite on each backend).
pub fn on_postgres() -> bool {
    std::env::var("PAYGATE_TEST_BACKEND").as_deref() == Ok("postgres")
}

impl Gateway {
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    pub async fn start_with_owned(env: Vec<(String, String)>) -> Self {
        let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        Self::start_with(&refs).await
    }

    /// A gateway with `env`; unless `env` says how it settles, it settles on a local chain of
    /// its own (anvil with USDC, started here).
    pub async fn start_with(env: &[(&str, &str)]) -> Self {
        let pg = on_postgres().then(paygate_store::testing::PgCluster::start);
        let url = pg.as_ref().map(|c| c.url());
        let mut g = Self::unstarted(env, pg, url);
        if !settles_by_itself(env) {
            g.settle_on(std::sync::Arc::new(chain::Chain::start()), chain::KEYS[0]);
        }
        g.spawn().await;
        g
    }

    /// A node of a cluster: a gateway on the shared PostgreSQL database `url` (with no chain
    /// unless `env` names one).
    pub async fn start_on(url: &str, env: &[(&str, &str)]) -> Self {
        Self::start_inner(env, None, Some(url.to_string())).await
    }

    /// A node of a cluster settling on the shared `chain` with its own `relayer` key.
    pub async fn start_on_chain(
        url: &str,
        chain: &std::sync::Arc<chain::Chain>,
        relayer: &str,
        env: &[(&str, &str)],
    ) -> Self {
        let mut g = Self::unstarted(env, None, Some(url.to_string()));
        g.settle_on(chain.clone(), relayer);
        g.spawn().await;
        g
    }

    /// Settles on `chain` with the `relayer` key (set before the first start).
    fn settle_on(&mut self, chain: std::sync::Arc<chain::Chain>, relayer: &str) {
        let mut env = chain.gateway_env();
        env.retain(|(k, _)| k != "PAYGATE_RELAYER_KEY");
        env.push(("PAYGATE_RELAYER_KEY".into(), relayer.into()));
        self.chain_env = env;
        self.chain = Some(chain);
    }

    /// The chain the harness gave this gateway, if it did.
    pub fn chain(&self) -> Option<&chain::Chain> {
        self.chain.as_deref()
    }

    /// A gateway that may refuse to start: its log once it exited (`Ok` if it served).
    pub async fn start_or_exit(env: &[(&str, &str)]) -> Result<Self, String> {
        let mut g = Self::unstarted(env, None, None);
        g.spawn_or_exit().await.map(|()| g)
    }

    /// The addresses the binary wrote to `paygate.addr` (`listen`, `tlsListen`, ...).
    pub fn addresses(&self) -> Value {
        let text = std::fs::read_to_string(self.dir.path().join("data").join("paygate.addr"))
            .expect("paygate.addr");
        serde_json::from_str(&text).expect("paygate.addr is JSON")
    }

    /// A node that is expected to refuse to start: its log once it exited (`Ok` if it served).
    pub async fn start_on_or_exit(url: &str, env: &[(&str, &str)]) -> Result<Self, String> {
        let mut g = Self::unstarted(env, None, Some(url.to_string()));
        g.spawn_or_exit().await.map(|()| g)
    }

    async fn start_inner(
        env: &[(&str, &str)],
        pg: Option<paygate_store::testing::PgCluster>,
        database_url: Option<String>,
    ) -> Self {
        let mut g = Self::unstarted(env, pg, database_url);
        g.spawn().await;
        g
    }

    fn unstarted(
        env: &[(&str, &str)],
        pg: Option<paygate_store::testing::PgCluster>,
        database_url: Option<String>,
    ) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Self {
            base: String::new(),
            port: 0,
            sandbox: None,
            dir: tempfile::tempdir().expect("tempdir"),
            http: Client::builder()
                .timeout(Duration::from_secs(20))
                .build()
                .expect("client"),
            extra_env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            child: None,
            upgrading: false,
            _pg: pg,
            database_url,
            chain: None,
            chain_env: Vec::new(),
        }
    }

    /// The gateway's store opened by the test itself, on whichever backend the gateway uses.
    /// Stop a sled gateway first: sled locks its directory (polled until the stopped process
    /// has let go of it).
    pub async fn store(&self) -> std::sync::Arc<dyn paygate_store::Store> {
        if let Some(url) = &self.database_url {
            let s = paygate_store::postgres::PgStore::connect_lazy(
                &paygate_store::testing::PgCluster::settings(url),
            )
            .expect("the gateway's database");
            return std::sync::Arc::new(s);
        }
        let dir = self.dir.path().join("data");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match paygate_store::SledStore::open(&dir) {
                Ok(s) => return std::sync::Arc::new(s),
                Err(e) if Instant::now() > deadline => panic!("opening the store: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("paygate.log")
    }

    /// Starts the binary and waits until it serves. At first start it binds port 0; should
    /// that port be taken before Pingora binds it (another process in between), it starts again.
    async fn spawn(&mut self) {
        if let Err(log) = self.spawn_or_exit().await {
            panic!("paygate exited early:\n{log}");
        }
    }

    /// As [`Self::spawn`], but a process that exits before serving is an answer (its log).
    async fn spawn_or_exit(&mut self) -> Result<(), String> {
        for attempt in 1..=3 {
            if self.try_spawn().await? {
                return Ok(());
            }
            assert!(attempt < 3, "paygate could not bind:\n{}", self.log());
        }
        Ok(())
    }

    /// `Ok(false)`: the process exited early because its address was taken; `Err`: it exited
    /// early for another reason (its log).
    async fn try_spawn(&mut self) -> Result<bool, String> {
        let first = self.port == 0;
        let addr_file = self.dir.path().join("data").join("paygate.addr");
        let _ = std::fs::remove_file(&addr_file);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("log file");
        // `PAYGATE_TEST_WRAPPER` (e.g. `heaptrack`) runs the binary under a profiler.
        let mut cmd = match std::env::var("PAYGATE_TEST_WRAPPER") {
            Ok(w) if !w.is_empty() => {
                let mut c = Command::new(w);
                c.arg(env!("CARGO_BIN_EXE_paygate"));
                c
            }
            _ => Command::new(env!("CARGO_BIN_EXE_paygate")),
        };
        cmd.arg("serve");
        if std::mem::take(&mut self.upgrading) {
            cmd.arg("--upgrade");
        }
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env(
                "PAYGATE__SERVER__LISTEN",
                format!("127.0.0.1:{}", self.port),
            )
            .env(
                "PAYGATE__PAYOUT__SANDBOX__LISTEN",
                self.sandbox.as_deref().unwrap_or("127.0.0.1:0"),
            )
            .env("PAYGATE__STORAGE__PATH", self.dir.path().join("data"))
            .env("PAYGATE_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("PAYGATE_LOG", "info")
            // Test upstreams live on loopback: allow it (the SSRF tests turn this off again).
            .env(
                "PAYGATE__UPSTREAM__ALLOW_PRIVATE_NETWORKS",
                r#"["127.0.0.0/8", "::1/128"]"#,
            )
            // No internet here: only the local chain is reachable.
            .env("PAYGATE__NETWORKS__BASE__RPC_URL", "")
            .env("PAYGATE__METRICS__FLUSH_INTERVAL_SECONDS", "1")
            .env("PAYGATE__METRICS__PROBE_INTERVAL_SECONDS", "1")
            // Every test client is 127.0.0.1 and many pay one payer's way: the rate limits'
            // own test turns them on.
            // Tests stop gateways often: no drain period unless a test asks for one.
            .env("PAYGATE__SERVER__GRACE_PERIOD_SECONDS", "0")
            .env("PAYGATE__LIMITS__CLIENT__PER_SECOND", "0")
            .env("PAYGATE__LIMITS__PAYER__PER_SECOND", "0")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        if let Some(url) = &self.database_url {
            cmd.env("PAYGATE__STORAGE__BACKEND", "postgres")
                .env("PAYGATE_DATABASE_URL", url);
        }
        for (k, v) in self.chain_env.iter().chain(&self.extra_env) {
            cmd.env(k, v);
        }
        // What this start logs comes after what earlier ones did.
        let logged_before = self.log().len();
        let bind_lost = |gw: &Self| {
            first
                && gw
                    .log()
                    .get(logged_before..)
                    .is_some_and(|l| l.contains("Address already in use"))
        };
        self.child = Some(cmd.spawn().expect("spawn paygate"));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self.base.is_empty() || self.port == 0 {
                self.read_addresses(&addr_file);
            }
            if !self.base.is_empty() {
                if let Ok(r) = self.http.get(self.url("/healthz")).send().await {
                    if r.status().is_success() {
                        return Ok(true);
                    }
                }
            }
            // The port picked was taken before Pingora bound it: its listener thread panics,
            // which may leave the process running without it.
            if bind_lost(self) {
                if let Some(mut child) = self.child.take() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                (self.port, self.base, self.sandbox) = (0, String::new(), None);
                return Ok(false);
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                if bind_lost(self) {
                    (self.port, self.base, self.sandbox) = (0, String::new(), None);
                    return Ok(false);
                }
                return Err(format!("({status})\n{}", self.log()));
            }
            assert!(
                Instant::now() < deadline,
                "paygate did not become ready:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Takes the addresses the binary bound from its `paygate.addr`, once written.
    fn read_addresses(&mut self, path: &std::path::Path) {
        let Ok(text) = std::fs::read_to_string(path) else {
            return;
        };
        let Ok(doc) = serde_json::from_str::<Value>(&text) else {
            return;
        };
        let listen: std::net::SocketAddr = doc["listen"].as_str().unwrap().parse().unwrap();
        self.port = listen.port();
        self.base = format!("http://127.0.0.1:{}", self.port);
        self.sandbox = doc["sandboxProvider"].as_str().map(str::to_string);
    }

    /// Replaces the extra environment used by the next (re)start.
    pub fn set_env(&mut self, env: Vec<(String, String)>) {
        self.extra_env = env;
    }

    /// The gateway's process id (to read its memory use).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Resident memory of the gateway process, in kB.
    pub fn rss_kb(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Graceful stop (SIGTERM) and wait; returns whether it exited by itself in time.
    pub fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        let pid = child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    /// SIGKILL, no chance to flush.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub async fn restart(&mut self) {
        assert!(
            self.stop(),
            "paygate did not stop on SIGTERM:\n{}",
            self.log()
        );
        self.spawn().await;
    }

    /// A new process takes over from the running one (`serve --upgrade`, with the current
    /// extra environment): the old one hands its sockets over, drains and exits. Returns once
    /// the old process has exited and the new one answers.
    pub async fn upgrade(&mut self) {
        let mut old = self.child.take().expect("a running gateway");
        self.upgrading = true;
        if let Err(log) = self.try_spawn().await {
            panic!("the upgrade did not start:\n{log}");
        }
        let deadline = Instant::now() + Duration::from_secs(40);
        while old.try_wait().expect("old process").is_none() {
            assert!(
                Instant::now() < deadline,
                "the old process never exited:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let r = self.http.get(self.url("/healthz")).send().await;
        assert!(r.is_ok_and(|r| r.status().is_success()), "{}", self.log());
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The base64 JSON receipt a paid answer carries in `header` (`x-payment-response` for v1,
/// `payment-response` for v2), decoded.
pub fn receipt(r: &Response, header: &str) -> Value {
    use base64::Engine;
    let raw = r.headers()[header].to_str().expect("receipt header");
    serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(raw)
            .expect("base64 receipt"),
    )
    .expect("JSON receipt")
}

/// Reads a JSON error body and checks its shape: `{code, message, requestId}` with the request
/// id equal to the `X-Request-Id` header. Returns `(status, code, body)`.
/// Sends and reads the JSON error answer.
pub async fn send_error(rb: reqwest::RequestBuilder) -> (u16, String, Value) {
    error_of(rb.send().await.expect("request")).await
}

pub async fn error_of(r: Response) -> (u16, String, Value) {
    let status = r.status().as_u16();
    let header_id = r
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .expect("x-request-id header");
    let body: Value = r.json().await.expect("error body is JSON");
    assert_eq!(
        body["requestId"],
        json!(header_id),
        "requestId matches header: {body}"
    );
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    let code = body["code"].as_str().expect("code").to_string();
    (status, code, body)
}

pub fn route_body(path: &str) -> Value {
    json!({
        "path": path,
        "priceUSD": 0.01,
        "targetUrl": "https://api.example.com/v1/echo",
        "network": "base-sepolia",
        "description": format!("route {path}"),
    })
}

/// Runs an interop client script (an official client on the other side); returns the JSON
/// report it prints last. Fails with its output when it exits non-zero.
pub async fn run_client(mut cmd: tokio::process::Command) -> Value {
    let out = cmd.output().await.expect("run client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("client report")
}

/// The JSON inside a base64 header value (a receipt, a challenge).
/// Runs the Node script `tests/interop/{script}` with `input` (JSON) as its argument, the test
/// tools' node_modules on its path; its stdout as JSON (a failure shows its stderr).
#[allow(dead_code)] // not every test binary runs a script
pub fn node_json(script: &str, input: &Value) -> Value {
    let modules = std::env::var("PAYGATE_TEST_NODE_MODULES")
        .expect("PAYGATE_TEST_NODE_MODULES must name the test node_modules (run via `make test`)");
    let out = std::process::Command::new("node")
        .arg(format!(
            "{}/tests/interop/{script}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .arg(input.to_string())
        .env("NODE_PATH", modules)
        .output()
        .expect("run node");
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the script's JSON")
}

pub fn b64_json(value: &str) -> Value {
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .expect("base64");
    serde_json::from_slice(&raw).expect("JSON")
}

/// A `402`'s v2 challenge (`PAYMENT-REQUIRED`).
pub fn decode_v2(r: &reqwest::Response) -> Value {
    b64_json(r.headers()["payment-required"].to_str().unwrap())
}

/// A payload as the base64 JSON of a payment header.
pub fn b64_header(payload: &Value) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(payload.to_string())
}

/// Environment for a gateway settling through `facilitator`'s served facilitator API (the
/// remote facilitator client), with `token` (an org key of it) as its bearer token.
pub fn remote_facilitator_env(facilitator: &Gateway, token: String) -> Vec<(String, String)> {
    vec![
        ("PAYGATE__FACILITATOR__KIND".into(), "remote".into()),
        (
            "PAYGATE__FACILITATOR__URL".into(),
            facilitator.url("/facilitator"),
        ),
        (
            "PAYGATE__FACILITATOR__BEARER_TOKEN_ENV".into(),
            "FACILITATOR_TOKEN".into(),
        ),
        ("FACILITATOR_TOKEN".into(), token),
    ]
}

/// Sends the payment header `header` to `path`: the status and the refusal's reason word.
pub async fn send_paid(gw: &Gateway, path: &str, header: &str) -> (u16, Option<String>) {
    let r = gw
        .http
        .get(gw.url(path))
        .header("payment-signature", header)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let reason = r
        .headers()
        .get("payment-required")
        .and_then(|h| paygate_x402::b64_json(h.to_str().ok()?))
        .and_then(|d| d["error"].as_str().map(str::to_string));
    (status, reason)
}

/// A gateway started with `env`, with org `acme` (receiver account 9) and its paid `/echo`.
pub async fn gateway_with_echo(
    env: Vec<(String, String)>,
) -> (Gateway, upstream::Upstream, alloy_primitives::Address) {
    let gw = Gateway::start_with_owned(env).await;
    let upstream = upstream::Upstream::start().await;
    let receiver = chain::address(9);
    let (_, key) = gw
        .create_org("acme", Some(&receiver.to_checksum(None)))
        .await;
    gw.create_route(
        &key,
        json!({"path": "echo", "priceUSD": 0.01, "targetUrl": format!("{}/echo?fixed=1", upstream.url),
               "network": "base-sepolia", "description": "echo"}),
    )
    .await;
    (gw, upstream, receiver)
}

pub async fn pay_v1(gw: &Gateway, spec: &chain::PaymentSpec) -> reqwest::Response {
    gw.http
        .get(gw.url("/gateway/acme/echo?q=1"))
        .header("X-PAYMENT", spec.v1_header())
        .send()
        .await
        .unwrap()
}

/// One JSON-RPC request to the stateless public endpoint; the `result` or `error` object.
pub async fn mcp_x402_rpc(gw: &Gateway, slug: &str, method: &str, params: Value) -> Value {
    let r = gw
        .http
        .post(gw.url(&format!("/mcp/x402/{slug}")))
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2025-06-18")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{method}");
    let v: Value = r.json().await.unwrap();
    v.get("result")
        .or_else(|| v.get("error"))
        .cloned()
        .unwrap_or(v)
}

/// Runs `paygate ARGS` against `gw` with `key` in the environment: (success, stdout, stderr).
pub async fn cli(gw: &Gateway, key: Option<&str>, args: &[&str]) -> (bool, String, String) {
    let url = gw.url("");
    let mut env = vec![("PAYGATE_URL", url.as_str())];
    env.extend(key.map(|k| ("PAYGATE_API_KEY", k)));
    run_paygate(&env, args).await
}

/// Runs `paygate ARGS` with `env` only: (success, stdout, stderr).
pub async fn run_paygate(env: &[(&str, &str)], args: &[&str]) -> (bool, String, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_paygate"));
    cmd.env_clear().envs(env.iter().copied()).args(args);
    let out = cmd.output().await.expect("run paygate");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
