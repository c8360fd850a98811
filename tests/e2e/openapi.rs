//! The OpenAPI description served at `/openapi.json` against the real binary: every documented
//! operation is served, and schemathesis (PyPI, an independent client) fuzzes every operation with
//! generated and malformed input. It fails on any 5xx, any answer that breaks the description
//! (status, content type, body schema, `Allow`), any schema-invalid input that is accepted, and
//! on a panic in the log.
//!
//! The gateway runs with anvil and Circle's USDC, so the facilitator endpoints are live, and with
//! the sandbox payout provider; an organisation, a route and an ACTIVE corridor are seeded so the
//! operations that need one reach their logic. `PAYGATE_SCHEMATHESIS_EXAMPLES` (default 15) sets
//! the examples per operation; `make openapi-fuzz` runs 300. A client generated from the
//! document by openapi-python-client (PyPI) creates a route and reads it back.

use crate::common;

use common::chain::Chain;
use common::{run_client, Gateway, ADMIN_TOKEN, WALLET_A};
use reqwest::Method;
use serde_json::Value;

/// The `schemathesis` entry point of the venv whose python `make test` names.
fn schemathesis() -> std::path::PathBuf {
    let python = std::env::var("PAYGATE_TEST_PYTHON")
        .expect("PAYGATE_TEST_PYTHON must name the venv's python (run via `make test`)");
    std::path::Path::new(&python)
        .with_file_name("schemathesis")
        .to_path_buf()
}

/// The number after `label` in schemathesis's summary (`Selected: 30/31`, `Tested: 30`).
fn summary_number(out: &str, label: &str) -> Option<usize> {
    let rest = &out[out.find(label)? + label.len()..];
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// A request for each documented operation, without credentials and with placeholder path
/// parameters, reaches a handler: never the router's "no such endpoint" nor `405`.
async fn every_documented_operation_is_served(gw: &Gateway, doc: &Value) -> usize {
    let mut n = 0;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        let concrete = path
            .split('/')
            .map(|seg| if seg.starts_with('{') { "x" } else { seg })
            .collect::<Vec<_>>()
            .join("/");
        for method in item.as_object().expect("path item").keys() {
            let m = Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
            let r = gw
                .http
                .request(m.clone(), gw.url(&concrete))
                .send()
                .await
                .expect("request");
            let status = r.status().as_u16();
            let body = r.text().await.unwrap_or_default();
            assert_ne!(status, 405, "{method} {path} is documented but not served");
            assert!(
                !(status == 404 && body.contains("no such endpoint")),
                "{method} {path} is documented but not routed"
            );
            n += 1;
        }
    }
    n
}

#[tokio::test]
async fn schemathesis_finds_no_5xx_and_no_schema_violation() {
    let chain = Chain::start();
    let mut env = chain.gateway_env();
    env.push(("PAYGATE_LOG".into(), "warn".into()));
    // Fully configured: without a master key, payer wallets and origin secrets answer 503.
    env.push((
        "PAYGATE_MASTER_KEY".into(),
        "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff".into(),
    ));
    let gw = Gateway::start_with_owned(env).await;

    let doc: Value = gw.get("/openapi.json").await.json().await.expect("json");
    assert_eq!(doc["openapi"], "3.1.0");
    let operations = every_documented_operation_is_served(&gw, &doc).await;
    assert!(operations >= 30, "only {operations} operations documented");

    // Seed what the operations need: an org with a key, a route, an ACTIVE corridor.
    let (_, key) = gw.create_org("fuzzed", Some(WALLET_A)).await;
    gw.create_paid_route(&key, "/weather", "http://127.0.0.1:9/x", false)
        .await;
    let corridor_id = gw.active_corridor(&key, "NGN").await;

    let examples =
        std::env::var("PAYGATE_SCHEMATHESIS_EXAMPLES").unwrap_or_else(|_| "15".to_string());
    let report = gw.dir.path().join("schemathesis");
    let config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/schemathesis.toml"
    );
    let mut cmd = tokio::process::Command::new(schemathesis());
    cmd.args(["--config-file", config, "run"])
        .arg(gw.url("/openapi.json"))
        .args(["--max-examples", &examples, "--request-timeout", "20"])
        .arg("--report-dir")
        .arg(&report)
        .args(["--report", "junit"])
        .env("ORG_KEY", &key)
        .env("ADMIN_TOKEN", ADMIN_TOKEN)
        .env("CORRIDOR_ID", &corridor_id)
        .env("NO_COLOR", "1")
        .current_dir(gw.dir.path());
    if let Ok(seed) = std::env::var("PAYGATE_SCHEMATHESIS_SEED") {
        cmd.args(["--seed", &seed]);
    }
    let out = cmd.output().await.expect("run schemathesis");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The summary (test cases, failures, seed) is kept in the test output for the record.
    let summary = stdout
        .find("SUMMARY")
        .map(|i| &stdout[i..])
        .unwrap_or(&stdout);
    println!("{summary}");
    assert!(
        out.status.success(),
        "schemathesis reported failures:\n{stdout}\n{stderr}\ngateway log:\n{}",
        gw.log()
    );
    // Every operation was selected and tested but two: schemathesis leaves out the schema's own
    // location (`GET /openapi.json`) and the config excludes the event stream (`GET /mcp/sse`).
    let selected = summary_number(&stdout, "Selected:");
    let tested = summary_number(&stdout, "Tested:");
    assert_eq!(selected, Some(operations - 2), "{summary}");
    assert_eq!(tested, selected, "{summary}");

    let log = gw.log();
    assert!(!log.contains("panicked"), "the gateway panicked:\n{log}");
    assert!(
        !log.contains("answered 500"),
        "the gateway answered 500:\n{log}"
    );
    // Still serving after the run.
    assert_eq!(gw.get("/healthz").await.status(), 200);
}

/// The document validates (openapi-spec-validator) and generates a client
/// (openapi-python-client) that works: the operator creates an organisation, the organisation
/// creates a route with a price given as a string and reads it back, and a bad route is
/// refused with every problem in `details`, all through the generated code.
#[tokio::test]
async fn a_generated_client_creates_and_reads_a_route() {
    let python = std::env::var("PAYGATE_TEST_PYTHON")
        .expect("PAYGATE_TEST_PYTHON must name the venv's python (run via `make test`)");
    let gw = Gateway::start().await;
    // Generated clients default to the deployment the document names.
    let doc: Value = gw.get("/openapi.json").await.json().await.unwrap();
    assert_eq!(doc["servers"][0]["url"], gw.url(""), "{}", doc["servers"]);
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/openapi_client.py"
    ))
    .arg(gw.url(""))
    .arg(ADMIN_TOKEN);
    let r = run_client(cmd).await;
    assert!(r["operations"].as_u64().unwrap() >= 30, "{r}");
    // The document's request examples are requests the API takes as they are.
    let example = |name: &str| doc["components"]["schemas"][name]["example"].clone();
    let (org, key) = gw.create_org("examples", Some(WALLET_A)).await;
    assert!(org["id"].is_string());
    let created = gw.create_route(&key, example("RouteCreate")).await;
    let updated = gw
        .api(
            &key,
            reqwest::Method::PATCH,
            &format!("/api/routes/{}", created["id"].as_str().unwrap()),
            Some(example("RouteUpdate")),
        )
        .await;
    assert_eq!(updated.status(), 200);
    let updated: Value = updated.json().await.unwrap();
    assert_eq!(updated["priceUSD"], 0.05, "{updated}");
    let admin = gw
        .admin(
            reqwest::Method::POST,
            "/admin/orgs",
            Some(example("OrgCreate")),
        )
        .await;
    assert_eq!(admin.status(), 201);
    let changed = gw
        .admin(
            reqwest::Method::PATCH,
            "/admin/orgs/globex",
            Some(example("OrgUpdate")),
        )
        .await;
    assert_eq!(changed.status(), 200);
    let corridor = gw
        .api(
            &key,
            reqwest::Method::POST,
            "/corridors",
            Some(example("CorridorCreate")),
        )
        .await;
    assert_eq!(corridor.status(), 201);
    let route = &r["route"];
    assert_eq!(route["path"], "/gen");
    assert_eq!(route["priceUSD"], 0.05);
    assert_eq!(r["read"], *route, "{r}");
    assert_eq!(r["refused"]["status"], 400);
    let fields: Vec<_> = r["refused"]["body"]["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["priceUSD", "targetUrl"], "{r}");
}
