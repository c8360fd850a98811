//! MCP end to end: the real binary on anvil with Circle's USDC. A Rust rmcp client speaks
//! Streamable HTTP (`/mcp`); the official Python SDK (PyPI `mcp`) speaks the legacy SSE transport
//! (`/mcp/sse`). Tool calls pay from the organisation's payer wallet through the hot path.

use crate::common;

use common::chain::{address, Chain, KEYS};
use common::upstream::Upstream;
use common::*;
use reqwest::Method;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{MaybeSendFuture, NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

mod guards;

const PRICE: u64 = 10_000; // $0.01
const MASTER_KEY: &str = "5f1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff0";
const RECEIVER: usize = 9;

struct Setup {
    chain: Chain,
    gw: Gateway,
    upstream: Upstream,
    key: String,
}

/// A gateway on anvil with org `acme` (receiver account 9, payer `payer`) and a paid `/echo`.
async fn setup(payer: usize, extra_env: &[(&str, &str)]) -> Setup {
    let chain = Chain::start();
    let mut env = chain.gateway_env();
    env.push(("PAYGATE_MASTER_KEY".into(), MASTER_KEY.into()));
    env.extend(
        extra_env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let gw = Gateway::start_with_owned(env).await;
    let upstream = Upstream::start().await;
    let (_, key) = gw
        .create_org("acme", Some(&address(RECEIVER).to_checksum(None)))
        .await;
    set_payer(&gw, "acme", payer).await;
    gw.create_route(
        &key,
        json!({"path": "echo", "priceUSD": 0.01, "targetUrl": format!("{}/echo?fixed=1", upstream.url),
               "network": "base-sepolia", "description": "Echoes the request"}),
    )
    .await;
    Setup {
        chain,
        gw,
        upstream,
        key,
    }
}

async fn set_payer(gw: &Gateway, slug: &str, account: usize) {
    let r = gw
        .admin(
            Method::PUT,
            &format!("/admin/orgs/{slug}/payer-wallet"),
            Some(json!({"privateKey": KEYS[account]})),
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

/// Counts `tools/list_changed` notifications.
#[derive(Clone, Default)]
struct Watcher {
    changed: Arc<tokio::sync::Notify>,
}

impl ClientHandler for Watcher {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + MaybeSendFuture + '_ {
        self.changed.notify_one();
        std::future::ready(())
    }
}

async fn rust_client(gw: &Gateway, key: &str) -> RunningService<RoleClient, Watcher> {
    rust_client_with(gw, key, Watcher::default())
        .await
        .expect("MCP client connects")
}

async fn rust_client_with(
    gw: &Gateway,
    key: &str,
    watcher: Watcher,
) -> Result<RunningService<RoleClient, Watcher>, rmcp::service::ClientInitializeError> {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(gw.url("/mcp")).auth_header(key),
    );
    watcher.serve(transport).await
}

fn text_of(r: &CallToolResult) -> String {
    serde_json::to_value(&r.content).unwrap()[0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

async fn call(
    client: &RunningService<RoleClient, Watcher>,
    name: &str,
    args: Value,
) -> CallToolResult {
    let params = CallToolRequestParams::new(name.to_string())
        .with_arguments(args.as_object().unwrap().clone());
    client.call_tool(params).await.expect("tools/call answered")
}

#[tokio::test]
async fn rust_client_lists_tools_and_pays_a_call_on_chain() {
    let s = setup(3, &[]).await;
    let client = rust_client(&s.gw, &s.key).await;
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 1, "{tools:?}");
    assert_eq!(tools[0].name, "echo");
    assert_eq!(tools[0].description.as_deref(), Some("Echoes the request"));
    let schema = serde_json::to_value(&tools[0].input_schema).unwrap();
    assert_eq!(schema["type"], "object");
    assert!(schema["properties"]["query"].is_object());
    assert!(schema["properties"]["body"].is_object());
    // MCP's current revision: annotations (each call pays: not read-only, not idempotent) and
    // an output schema the structured result follows.
    let hints = tools[0].annotations.as_ref().expect("annotations");
    assert_eq!(
        (
            hints.read_only_hint,
            hints.idempotent_hint,
            hints.open_world_hint
        ),
        (Some(false), Some(false), Some(true))
    );
    let output = serde_json::to_value(tools[0].output_schema.as_ref().unwrap()).unwrap();
    assert_eq!(output["required"], json!(["status", "body"]));

    let payer = address(3);
    let before = (
        s.chain.balance(payer).await,
        s.chain.balance(address(RECEIVER)).await,
    );
    let r = call(
        &client,
        "echo",
        json!({"query": {"q": "hello world"}, "body": {"x": 1}}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{r:?}\n{}", s.gw.log());
    let text = text_of(&r);
    let echoed: Value = serde_json::from_str(&text).expect("the upstream's JSON as text");
    assert_eq!(echoed["path"], "/echo");
    assert_eq!(echoed["method"], "POST");
    assert_eq!(echoed["query"], "fixed=1&q=hello+world");
    assert_eq!(echoed["body"], r#"{"x":1}"#);
    let structured = r.structured_content.as_ref().expect("structuredContent");
    assert_eq!(structured["status"], 200);
    assert_eq!(structured["body"], echoed, "the same answer, as JSON");
    let lower = text.to_lowercase();
    assert!(!lower.contains("payment-signature") && !lower.contains("x-payment"));
    assert!(
        !lower.contains(&format!("{payer:x}")[2..]),
        "no payer address"
    );
    assert_eq!(s.upstream.hits(), 1);
    assert_eq!(s.chain.balance(payer).await, before.0 - PRICE);
    assert_eq!(s.chain.balance(address(RECEIVER)).await, before.1 + PRICE);

    // Bad arguments are tool errors and charge nothing.
    let r = call(&client, "echo", json!({"method": "TRACE"})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(text_of(&r).contains("method"), "{}", text_of(&r));
    // An unknown tool is a protocol error.
    let params = CallToolRequestParams::new("nope");
    assert!(client.call_tool(params).await.is_err());
    assert_eq!(s.chain.balance(payer).await, before.0 - PRICE);
    assert_eq!(s.upstream.hits(), 1);

    // The call went through the hot path like any agent's: it shows in the org's metrics.
    // Only the paid call reached the gateway (bad arguments never leave the MCP server).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let m: Value =
            s.gw.api(&s.key, Method::GET, "/api/gateway/metrics?window=24h", None)
                .await
                .json()
                .await
                .unwrap();
        if m["metrics"]["totalRequests"] == 1 {
            assert_eq!(m["metrics"]["paid"], 1, "{m}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{m}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    client.cancel().await.unwrap();
}

/// The next JSON line the Python client prints.
async fn next_json(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) -> Value {
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("client output in time")
        .unwrap()
        .unwrap_or_default();
    serde_json::from_str::<Value>(&line).unwrap_or(json!({ "raw": line }))
}

#[tokio::test]
async fn python_sdk_over_sse_pays_and_hears_about_route_changes() {
    let s = setup(4, &[]).await;
    let py = std::env::var("PAYGATE_TEST_PYTHON").expect("PAYGATE_TEST_PYTHON (run via make test)");
    let payer = address(4);
    let before = s.chain.balance(payer).await;
    let mut child = tokio::process::Command::new(py)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/mcp_sse_client.py"
        ))
        .arg(s.gw.url("/mcp/sse"))
        .arg(&s.key)
        .args([
            "--call",
            "echo",
            "--args",
            r#"{"query": {"a": "1"}}"#,
            "--watch",
            "20",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python MCP client");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let tools = next_json(&mut lines).await;
    assert_eq!(tools["event"], "tools", "{tools}");
    assert_eq!(tools["tools"][0]["name"], "echo");
    assert_eq!(tools["tools"][0]["description"], "Echoes the request");
    let called = next_json(&mut lines).await;
    assert_eq!(called["event"], "call", "{called}\n{}", s.gw.log());
    assert_eq!(called["isError"], false, "{called}");
    let echoed: Value = serde_json::from_str(called["text"].as_str().unwrap()).unwrap();
    assert_eq!(echoed["query"], "fixed=1&a=1");
    assert_eq!(s.chain.balance(payer).await, before - PRICE);

    assert_eq!(next_json(&mut lines).await["event"], "ready");
    describe_first_route(&s, "Echoes, now described better").await;
    let changed = next_json(&mut lines).await;
    assert_eq!(changed["event"], "list_changed", "{changed}");
    let tools = next_json(&mut lines).await;
    assert_eq!(
        tools["tools"][0]["description"],
        "Echoes, now described better"
    );
    let status = child.wait().await.unwrap();
    assert!(status.success());
}

/// PATCHes the description of the org's first route (the one `setup` made).
async fn describe_first_route(s: &Setup, description: &str) {
    let routes: Value =
        s.gw.api(&s.key, Method::GET, "/api/routes", None)
            .await
            .json()
            .await
            .unwrap();
    let id = routes[0]["id"].as_str().unwrap();
    let r =
        s.gw.api(
            &s.key,
            Method::PATCH,
            &format!("/api/routes/{id}"),
            Some(json!({ "description": description })),
        )
        .await;
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn rust_client_receives_list_changed_on_patch() {
    let s = setup(5, &[]).await;
    let watcher = Watcher::default();
    let changed = watcher.changed.clone();
    let client = rust_client_with(&s.gw, &s.key, watcher).await.unwrap();
    assert_eq!(client.list_all_tools().await.unwrap().len(), 1);
    describe_first_route(&s, "new words").await;
    tokio::time::timeout(Duration::from_secs(10), changed.notified())
        .await
        .expect("tools/list_changed arrives");
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools[0].description.as_deref(), Some("new words"));
    // A new route is announced too.
    s.gw.create_route(
        &s.key,
        json!({"path": "second", "priceUSD": 0.02, "targetUrl": format!("{}/2", s.upstream.url),
               "network": "base-sepolia"}),
    )
    .await;
    tokio::time::timeout(Duration::from_secs(10), changed.notified())
        .await
        .expect("tools/list_changed for the new route");
    assert_eq!(client.list_all_tools().await.unwrap().len(), 2);
    client.cancel().await.unwrap();
}

/// Streamable HTTP validates `Origin` (MCP's DNS-rebinding rule): a browser page of another
/// origin is refused `403`; the gateway's own origin and clients that send none are served.
#[tokio::test]
async fn streamable_http_refuses_a_foreign_origin() {
    let s = setup(7, &[]).await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "origin-test", "version": "1"}}});
    let post = |origin: Option<String>| {
        let mut r =
            s.gw.http
                .post(s.gw.url("/mcp"))
                .bearer_auth(&s.key)
                .header("accept", "application/json, text/event-stream")
                .json(&init);
        if let Some(o) = origin {
            r = r.header("origin", o);
        }
        r.send()
    };
    let r = post(Some("https://evil.example".into())).await.unwrap();
    let (status, code, _) = error_of(r).await;
    assert_eq!((status, code.as_str()), (403, "FORBIDDEN"));
    for origin in [Some(s.gw.base.clone()), None] {
        let r = post(origin.clone()).await.unwrap();
        assert_eq!(r.status(), 200, "{origin:?}");
    }
}

#[tokio::test]
async fn bad_keys_get_401_json_before_any_stream() {
    let gw = Gateway::start().await;
    let (org, key) = gw.create_org("acme", Some(WALLET_A)).await;
    let r = gw.admin(Method::POST, "/admin/orgs/acme/keys", None).await;
    let revoked: Value = r.json().await.unwrap();
    let r = gw
        .admin(
            Method::DELETE,
            &format!(
                "/admin/orgs/acme/keys/{}",
                revoked["keyId"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert!(r.status().is_success());
    let wrong = format!("{}x", &key[..key.len() - 1]);
    let revoked = revoked["apiKey"].as_str().unwrap().to_string();
    for auth in [None, Some(wrong.as_str()), Some(revoked.as_str())] {
        for (method, path) in [
            (Method::GET, "/mcp/sse"),
            (Method::POST, "/mcp"),
            (Method::POST, "/mcp/message?sessionId=x"),
        ] {
            let mut rb = gw
                .http
                .request(method.clone(), gw.url(path))
                .header("accept", "text/event-stream, application/json")
                .header("content-type", "application/json")
                .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
            if let Some(k) = auth {
                rb = rb.bearer_auth(k);
            }
            let r = rb.send().await.unwrap();
            assert_eq!(
                r.headers()["content-type"],
                "application/json",
                "{method} {path}"
            );
            let (status, code, body) = error_of(r).await;
            assert_eq!(
                (status, code.as_str()),
                (401, "UNAUTHORIZED"),
                "{method} {path}"
            );
            assert!(body["requestId"].is_string());
        }
    }
    // The valid key opens the stream.
    let r = open_sse(&gw, &key).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    assert!(org["id"].is_string());
}

async fn open_sse(gw: &Gateway, key: &str) -> reqwest::Response {
    gw.http
        .get(gw.url("/mcp/sse"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
}

/// A POST of a client message into an SSE session, ready for its body.
fn post_to(gw: &Gateway, key: &str, session: &str) -> reqwest::RequestBuilder {
    gw.http
        .post(gw.url(&format!("/mcp/message?sessionId={session}")))
        .bearer_auth(key)
}

/// Reads SSE frames from a streaming response until `pred` matches one (or time runs out).
async fn read_until(r: &mut reqwest::Response, pred: impl Fn(&str) -> bool) -> String {
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        match tokio::time::timeout_at(deadline, r.chunk()).await {
            Ok(Ok(Some(c))) => {
                seen.push_str(&String::from_utf8_lossy(&c));
                if pred(&seen) {
                    return seen;
                }
            }
            _ => break,
        }
    }
    panic!("stream ended without the expected frame: {seen:?}")
}

#[tokio::test]
async fn sse_sessions_are_per_org_kept_alive_and_cleaned_up() {
    let gw = Gateway::start_with(&[
        ("PAYGATE__MCP__KEEP_ALIVE_SECONDS", "1"),
        ("PAYGATE__MCP__MAX_SESSIONS_PER_ORG", "1"),
    ])
    .await;
    let (_, acme) = gw.create_org("acme", Some(WALLET_A)).await;
    let (_, globex) = gw.create_org("globex", Some(WALLET_B)).await;
    gw.create_route(&acme, route_body("/acme-only")).await;
    gw.create_route(&globex, route_body("/globex-only")).await;

    let mut stream = open_sse(&gw, &acme).await;
    let first = read_until(&mut stream, |s| s.contains("sessionId=")).await;
    assert!(first.contains("event: endpoint"), "{first}");
    let session = first
        .split("sessionId=")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    // Keep-alive comments flow while idle.
    read_until(&mut stream, |s| s.contains(": keep-alive")).await;

    // The session limit per org (1 here) holds; another org is not affected.
    let r = open_sse(&gw, &acme).await;
    assert_eq!(error_of(r).await.0, 429);
    let other = open_sse(&gw, &globex).await;
    assert_eq!(other.status(), 200);

    // Another org's key cannot post into acme's session.
    let msg = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let r = post_to(&gw, &globex, &session)
        .json(&msg)
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(r).await.0, 404);
    // Malformed messages are refused with JSON errors, nothing reaches the session.
    let r = post_to(&gw, &acme, &session)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(r).await.0, 400);
    let r = gw
        .http
        .post(gw.url("/mcp/message"))
        .bearer_auth(&acme)
        .json(&msg)
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(r).await.0, 400);

    // The owner's messages are answered on the stream, listing only acme's tools.
    let post = |m: Value| post_to(&gw, &acme, &session).json(&m).send();
    assert_eq!(post(msg.clone()).await.unwrap().status(), 202);
    read_until(&mut stream, |s| s.contains("\"serverInfo\"")).await;
    post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await
        .unwrap();
    post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        .await
        .unwrap();
    let listed = read_until(&mut stream, |s| s.contains("\"id\":2")).await;
    assert!(listed.contains("acme-only"), "{listed}");
    assert!(!listed.contains("globex"), "{listed}");

    // Dropping the stream ends the session: its id is gone and a new session may open.
    drop(stream);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = open_sse(&gw, &acme).await;
        if r.status() == 200 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "session not cleaned up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = post(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}))
        .await
        .unwrap();
    assert_eq!(error_of(r).await.0, 404);
}
