//! End-to-end: the 402 challenge in all three forms, the sandbox route, suspension, missing
//! wallets, discovery, and an official x402 client's own parser reading our challenge.

use crate::common;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};

#[tokio::test]
async fn challenge_carries_all_three_forms_built_from_the_route() {
    let gw = Gateway::start().await;
    let (_, key) = gw.create_org("acme", Some(&WALLET_A.to_lowercase())).await;
    gw.create_route(
        &key,
        json!({"path": "/v1/quote", "priceUSD": 0.000001, "targetUrl": "https://api.example.com",
               "network": "eip155:84532", "description": "Quotes"}),
    )
    .await;
    let r = gw.get("/gateway/acme/v1/quote?symbol=ETH").await;
    assert_eq!(r.status(), 402);
    assert_eq!(r.headers()["content-type"], "application/json");
    let seed: Value =
        serde_json::from_str(r.headers()["x-payment-requirements"].to_str().unwrap()).unwrap();
    let v2 = decode_v2(&r);
    let body: Value = r.json().await.unwrap();

    let resource = format!("{}/gateway/acme/v1/quote", gw.base);
    assert_eq!(body["x402Version"], 1);
    assert!(body["error"].as_str().is_some());
    let v1 = &body["accepts"][0];
    assert_eq!(v1, &seed, "seed header equals the v1 requirement");
    assert_eq!(v1["scheme"], "exact");
    assert_eq!(
        v1["network"], "base-sepolia",
        "v1 name even though the route says eip155:84532"
    );
    assert_eq!(v1["maxAmountRequired"], "1");
    assert_eq!(
        v1["resource"],
        json!(resource),
        "absolute, without the query"
    );
    assert_eq!(v1["payTo"], WALLET_A);
    assert_eq!(v1["asset"], "0x036CbD53842c5426634e7929541eC2318f3dCF7e");
    assert_eq!(v1["extra"], json!({"name": "USDC", "version": "2"}));
    assert_eq!(v1["maxTimeoutSeconds"], 60);
    assert_eq!(v1["description"], "Quotes");
    assert_eq!(v1["mimeType"], "");

    assert_eq!(v2["x402Version"], 2);
    assert_eq!(v2["resource"]["url"], json!(resource));
    let a = &v2["accepts"][0];
    assert_eq!(a["network"], "eip155:84532");
    assert_eq!(a["amount"], "1");
    assert_eq!(a["payTo"], WALLET_A);
    assert_eq!(a["asset"], v1["asset"]);
    assert_eq!(a["extra"], v1["extra"]);

    // A malformed payment header is a clear 400, never proxied.
    let r = gw
        .http
        .get(gw.url("/gateway/acme/v1/quote"))
        .header("X-PAYMENT", "e30=")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["code"], "INVALID_PAYMENT");
    // A trailing slash reaches the same route.
    assert_eq!(gw.get("/gateway/acme/v1/quote/").await.status(), 402);
    // Prefixes and unknown orgs do not.
    for p in [
        "/gateway/acme/v1",
        "/gateway/acme/v1/quote/x",
        "/gateway/nobody/v1/quote",
        "/gateway/acme",
        "/gateway/",
    ] {
        let (status, code, _) = error_of(gw.get(p).await).await;
        assert_eq!((status, code.as_str()), (404, "ROUTE_NOT_FOUND"), "{p}");
    }
}

#[tokio::test]
async fn public_base_url_and_timeout_come_from_config() {
    let gw = Gateway::start_with(&[
        (
            "PAYGATE__SERVER__PUBLIC_BASE_URL",
            "https://pay.example.com/",
        ),
        ("PAYGATE__X402__MAX_TIMEOUT_SECONDS", "120"),
    ])
    .await;
    let (_, key) = gw.create_org("acme", Some(WALLET_A)).await;
    gw.create_route(&key, route_body("echo")).await;
    let r = gw
        .http
        .get(gw.url("/gateway/acme/echo"))
        .header("Host", "evil.example.net")
        .header("X-Forwarded-Host", "evil.example.net")
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["accepts"][0]["resource"],
        "https://pay.example.com/gateway/acme/echo"
    );
    assert_eq!(body["accepts"][0]["maxTimeoutSeconds"], 120);
}

#[tokio::test]
async fn sandbox_suspension_and_missing_wallet() {
    let gw = Gateway::start().await;
    // The sandbox exists on a fresh deployment and answers 402 on base-sepolia; a malformed
    // payment is 400 as on any route (a valid one: e2e_interop's sandbox test).
    for method in [Method::GET, Method::POST] {
        let garbage = gw
            .http
            .request(method.clone(), gw.url("/gateway/demo/demo"))
            .header("X-PAYMENT", "e30=")
            .send()
            .await
            .unwrap();
        assert_eq!(garbage.status(), 400);
        let r = gw
            .http
            .request(method, gw.url("/gateway/demo/demo"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 402);
        let v2 = decode_v2(&r);
        assert_eq!(v2["accepts"][0]["network"], "eip155:84532");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["accepts"][0]["network"], "base-sepolia");
        assert_eq!(
            body["accepts"][0]["asset"],
            "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
        );
        assert_eq!(body["accepts"][0]["extra"]["name"], "USDC");
    }

    // No receiver wallet: 503 MISCONFIGURED; setting one fixes it at once.
    let (_, key) = gw.create_org("acme", None).await;
    gw.create_route(&key, route_body("echo")).await;
    let (status, code, _) = error_of(gw.get("/gateway/acme/echo").await).await;
    assert_eq!((status, code.as_str()), (503, "MISCONFIGURED"));
    gw.admin(
        Method::PATCH,
        "/admin/orgs/acme",
        Some(json!({"receiverWallet": WALLET_B})),
    )
    .await;
    let body: Value = gw.get("/gateway/acme/echo").await.json().await.unwrap();
    assert_eq!(body["accepts"][0]["payTo"], WALLET_B);

    // Suspension blocks every route of the org at once; lifting it restores them.
    gw.create_route(&key, route_body("two")).await;
    let r = gw
        .admin(
            Method::PATCH,
            "/admin/orgs/acme",
            Some(json!({"suspended": true})),
        )
        .await;
    assert_eq!(r.status(), 200);
    for p in ["/gateway/acme/echo", "/gateway/acme/two"] {
        let (status, code, _) = error_of(gw.get(p).await).await;
        assert_eq!((status, code.as_str()), (403, "ORG_SUSPENDED"), "{p}");
    }
    gw.admin(
        Method::PATCH,
        "/admin/orgs/acme",
        Some(json!({"suspended": false})),
    )
    .await;
    assert_eq!(gw.get("/gateway/acme/two").await.status(), 402);
}

#[tokio::test]
async fn discovery_lists_only_active_discoverable_routes() {
    let gw = Gateway::start().await;
    let (_, a) = gw.create_org("alpha", Some(WALLET_A)).await;
    let (_, b) = gw.create_org("beta", Some(WALLET_B)).await;
    let mut listed = Vec::new();
    for i in 0..3 {
        let mut body = route_body(&format!("pub{i}"));
        body["discoverable"] = json!(true);
        body["bazaarCategory"] = json!("data");
        listed.push(gw.create_route(&a, body).await);
    }
    gw.create_route(&a, route_body("hidden")).await;
    let mut bb = route_body("b-pub");
    bb["discoverable"] = json!(true);
    gw.create_route(&b, bb).await;

    // The x402 v2 discovery shape; the sandbox route is listed too (tagged `sandbox`).
    let all: Value = gw.get("/discovery/resources").await.json().await.unwrap();
    assert_eq!(all["x402Version"], 2);
    assert_eq!(all["pagination"]["total"], 5);
    let resources: Vec<_> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["resource"].as_str().unwrap().to_string())
        .collect();
    assert!(!resources.iter().any(|r| r.ends_with("/hidden")));
    let demo = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| {
            i["resource"]
                .as_str()
                .unwrap()
                .ends_with("/gateway/demo/demo")
        })
        .unwrap();
    assert_eq!(demo["tags"], json!(["sandbox"]));
    let item = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["resource"].as_str().unwrap().ends_with("/pub0"))
        .unwrap();
    assert_eq!(item["type"], "http");
    assert_eq!(item["x402Version"], 2);
    assert_eq!(item["metadata"]["category"], "data");
    assert_eq!(item["tags"], json!(["data"]));
    assert_eq!(item["serviceName"], "alpha");
    assert_eq!(item["accepts"][0]["amount"], "10000");
    assert_eq!(item["accepts"][0]["network"], "eip155:84532");
    assert_eq!(
        item["extensions"]["bazaar"]["info"]["input"]["method"],
        "GET"
    );

    let page: Value = gw
        .get("/discovery/resources?limit=2&offset=1")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    assert_eq!(
        page["pagination"],
        json!({"limit": 2, "offset": 1, "total": 5})
    );
    let beta: Value = gw
        .get("/discovery/resources?org=beta")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(beta["pagination"]["total"], 1);
    let other: Value = gw
        .get("/discovery/resources?type=mcp")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(other["pagination"]["total"], 0);
    let to_b: Value = gw
        .get(&format!(
            "/discovery/resources?type=http&payTo={}",
            WALLET_B.to_ascii_uppercase().replace("0X", "0x")
        ))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(to_b["pagination"]["total"], 1, "{to_b}");
    let elsewhere: Value = gw
        .get("/discovery/resources?network=eip155:8453")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(elsewhere["pagination"]["total"], 0);
    let (status, code, _) = error_of(gw.get("/discovery/resources?limit=abc").await).await;
    assert_eq!((status, code.as_str()), (400, "VALIDATION_ERROR"));
    // A type that names nothing is refused like a bad limit, not answered with an empty page.
    let (status, code, e) = error_of(gw.get("/discovery/resources?type=bogus").await).await;
    assert_eq!((status, code.as_str()), (400, "VALIDATION_ERROR"));
    assert_eq!(e["details"][0]["field"], "type", "{e}");

    // Deactivated and deleted routes vanish at once.
    let id0 = listed[0]["id"].as_str().unwrap();
    let id1 = listed[1]["id"].as_str().unwrap();
    gw.api(
        &a,
        Method::PATCH,
        &format!("/api/routes/{id0}"),
        Some(json!({"active": false})),
    )
    .await;
    gw.api(&a, Method::DELETE, &format!("/api/routes/{id1}"), None)
        .await;
    let now: Value = gw
        .get("/discovery/resources?org=alpha")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(now["pagination"]["total"], 1);
    // The well-known document lists the same routes' URLs.
    let wk: Value = gw.get("/.well-known/x402").await.json().await.unwrap();
    assert_eq!(wk["version"], 1);
    assert_eq!(wk["resources"].as_array().unwrap().len(), 3, "{wk}");
    assert!(wk["instructions"]
        .as_str()
        .unwrap()
        .contains("/discovery/resources"));
    // Suspended orgs vanish too.
    gw.admin(
        Method::PATCH,
        "/admin/orgs/beta",
        Some(json!({"suspended": true})),
    )
    .await;
    let now: Value = gw.get("/discovery/resources").await.json().await.unwrap();
    assert_eq!(now["pagination"]["total"], 2);
}

/// The official Python x402 SDK (PyPI `x402`) parses our challenge with its own models.
/// `make test` prepares the venv and sets PAYGATE_TEST_PYTHON.
#[tokio::test]
async fn official_python_client_parses_the_challenge() {
    let python = std::env::var("PAYGATE_TEST_PYTHON").expect(
        "PAYGATE_TEST_PYTHON must name a python with the x402 package (run via `make test`)",
    );
    let gw = Gateway::start().await;
    let (_, key) = gw.create_org("acme", Some(WALLET_A)).await;
    gw.create_route(&key, route_body("echo")).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/x402_parse_challenge.py"
    );
    let out = tokio::process::Command::new(python)
        .arg(script)
        .arg(gw.url("/gateway/acme/echo"))
        .arg(gw.url("/gateway/demo/demo"))
        .output()
        .await
        .expect("run python");
    assert!(
        out.status.success(),
        "python x402 client rejected the challenge:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok 2 challenges"));
}

/// A route's `mimeType` (what it answers) is in both forms of its challenge and in discovery;
/// a bad one is named in a `400`, `null` clears it; the sandbox says `application/json`.
#[tokio::test]
async fn a_routes_mime_type_is_in_its_challenge_and_checked() {
    let gw = Gateway::start().await;
    let (_, key) = gw.create_org("acme", Some(WALLET_A)).await;
    let mut body = route_body("/report");
    body["mimeType"] = json!("Text/CSV");
    body["discoverable"] = json!(true);
    let route = gw.create_route(&key, body).await;
    assert_eq!(route["mimeType"], "text/csv");
    let r = gw.get("/gateway/acme/report").await;
    assert_eq!(r.status(), 402);
    assert_eq!(decode_v2(&r)["resource"]["mimeType"], "text/csv");
    let v1: Value = r.json().await.unwrap();
    assert_eq!(v1["accepts"][0]["mimeType"], "text/csv");
    let listed: Value = gw.get("/discovery/resources").await.json().await.unwrap();
    assert_eq!(listed["items"][0]["mimeType"], "text/csv", "{listed}");

    for bad in [
        json!("csv"),
        json!("text/"),
        json!("text/csv; charset=utf-8"),
        json!(7),
    ] {
        let mut b = route_body("/bad");
        b["mimeType"] = bad.clone();
        let r = gw.api(&key, Method::POST, "/api/routes", Some(b)).await;
        let (status, code, err) = error_of(r).await;
        assert_eq!((status, code.as_str()), (400, "VALIDATION_ERROR"), "{bad}");
        assert_eq!(err["details"][0]["field"], "mimeType", "{err}");
    }
    let id = route["id"].as_str().unwrap();
    let r = gw
        .api(
            &key,
            Method::PATCH,
            &format!("/api/routes/{id}"),
            Some(json!({"mimeType": null})),
        )
        .await;
    let cleared: Value = r.json().await.unwrap();
    assert_eq!(cleared["mimeType"], Value::Null);
    let v1: Value = gw.get("/gateway/acme/report").await.json().await.unwrap();
    assert_eq!(v1["accepts"][0]["mimeType"], "");

    let demo: Value = gw.get("/gateway/demo/demo").await.json().await.unwrap();
    assert_eq!(demo["accepts"][0]["mimeType"], "application/json");
}

/// A route's `inputSchema` / `outputSchema` are checked as JSON Schemas (every bad one named in
/// a `400`, `null` clears) and become the bazaar extension of its v2 challenge and of its
/// discovery item; the official x402 SDK reads the listing and finds every item's and the
/// challenge's bazaar data valid with its own validators.
#[tokio::test]
async fn schemas_are_checked_and_become_valid_bazaar_data() {
    let python = std::env::var("PAYGATE_TEST_PYTHON")
        .expect("PAYGATE_TEST_PYTHON must name the venv's python (run via `make test`)");
    let gw = Gateway::start().await;
    let (_, key) = gw.create_org("acme", Some(WALLET_A)).await;
    let input =
        json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]});
    let output = json!({"type": "object", "properties": {"answer": {"type": "string"}}});
    let mut body = route_body("/ask");
    body["discoverable"] = json!(true);
    body["publicTool"] = json!(true);
    body["inputSchema"] = input.clone();
    body["outputSchema"] = output.clone();
    let route = gw.create_route(&key, body).await;
    assert_eq!(route["inputSchema"], input);
    assert_eq!(route["outputSchema"], output);
    assert_eq!(route["publicTool"], true);

    let r = gw.get("/gateway/acme/ask").await;
    let bazaar = decode_v2(&r)["extensions"]["bazaar"].clone();
    assert_eq!(bazaar["info"]["input"]["method"], "POST", "{bazaar}");
    assert_eq!(bazaar["info"]["input"]["bodyType"], "json");
    assert_eq!(
        bazaar["schema"]["properties"]["input"]["properties"]["body"],
        input
    );
    assert_eq!(
        bazaar["schema"]["properties"]["output"]["properties"]["example"],
        output
    );

    let mut cmd = tokio::process::Command::new(&python);
    cmd.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/x402_bazaar_check.py"
    ))
    .arg(gw.url(""))
    .arg(gw.url("/gateway/acme/ask"));
    let report = run_client(cmd).await;
    assert_eq!(report["version"], 2);
    assert_eq!(report["challenge"]["valid"], true, "{report}");
    let items = report["items"].as_array().unwrap();
    // The route, its public MCP tool, and the sandbox route.
    assert_eq!(items.len(), 3, "{report}");
    for item in items {
        assert_eq!(item["valid"], true, "{item}");
    }
    let tool = items.iter().find(|i| i["type"] == "mcp").unwrap();
    assert_eq!(tool["input"]["toolName"], "ask");
    assert_eq!(tool["input"]["transport"], "streamable-http");
    assert!(tool["resource"]
        .as_str()
        .unwrap()
        .ends_with("/mcp/x402/acme#ask"));

    let id = route["id"].as_str().unwrap();
    for bad in [
        json!("a string"),
        json!({"type": "no-such-type"}),
        json!({"properties": {"q": {"minLength": -1}}}),
        json!({"type": "object", "description": "x".repeat(5 * 1024)}),
        // A reference to elsewhere: nothing is fetched.
        json!({"$ref": "https://schemas.example/q.json"}),
    ] {
        let r = gw
            .api(
                &key,
                Method::PATCH,
                &format!("/api/routes/{id}"),
                Some(json!({"inputSchema": bad.clone(), "outputSchema": bad})),
            )
            .await;
        let (status, code, err) = error_of(r).await;
        assert_eq!((status, code.as_str()), (400, "VALIDATION_ERROR"), "{err}");
        let fields: Vec<_> = err["details"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["field"].as_str().unwrap().to_string())
            .collect();
        assert!(fields.contains(&"inputSchema".to_string()), "{err}");
    }
    let cleared: Value = gw
        .api(
            &key,
            Method::PATCH,
            &format!("/api/routes/{id}"),
            Some(json!({"inputSchema": null, "outputSchema": null})),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(cleared["inputSchema"], Value::Null);
    let r = gw.get("/gateway/acme/ask").await;
    assert_eq!(
        decode_v2(&r)["extensions"]["bazaar"]["info"]["input"]["method"],
        "GET"
    );
}

/// Money is read one way and written one way: a price as a decimal string or a JSON number
/// (same exactness), answered as a JSON number in plain decimal notation (`0.000001`, never
/// `1e-6`); the challenge asks for the same base units.
#[tokio::test]
async fn prices_are_read_as_strings_or_numbers_and_written_plainly() {
    let gw = Gateway::start().await;
    let (_, key) = gw.create_org("acme", Some(WALLET_A)).await;
    let mut body = route_body("/tiny");
    body["priceUSD"] = json!("0.000001");
    let r = gw.api(&key, Method::POST, "/api/routes", Some(body)).await;
    assert_eq!(r.status(), 201);
    let text = r.text().await.unwrap();
    assert!(text.contains(r#""priceUSD":0.000001"#), "{text}");
    let mut body = route_body("/big");
    body["priceUSD"] = json!(1000000);
    let text = gw
        .api(&key, Method::POST, "/api/routes", Some(body))
        .await
        .text()
        .await
        .unwrap();
    assert!(text.contains(r#""priceUSD":1000000"#), "{text}");
    let v1: Value = gw.get("/gateway/acme/tiny").await.json().await.unwrap();
    assert_eq!(v1["accepts"][0]["maxAmountRequired"], "1");
    let list = gw
        .api(&key, Method::GET, "/api/routes", None)
        .await
        .text()
        .await
        .unwrap();
    assert!(list.contains(r#""priceUSD":0.000001,"#), "{list}");
}
