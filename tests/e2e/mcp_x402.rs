//! The caller pays over MCP (x402's MCP transport), end to end: the real binary on anvil with
//! Circle's USDC, the public endpoint `/mcp/x402/{orgSlug}` (no API key), and only official
//! clients on the agent's side: the MCP Python SDK with the x402 SDK's MCP client
//! (`tests/interop/x402_mcp_pay.py`).

use crate::common;

use common::chain::{address, Chain, PaymentSpec, KEYS};
use common::escrow;
use common::upstream::Upstream;
use common::*;
use serde_json::{json, Value};

const PRICE: u64 = 20_000; // $0.02
const RECEIVER: usize = 9;

/// Runs the official-client script against `url`'s tool `tool` with the key of account `payer`.
async fn pay_tool(url: &str, payer: usize, tool: &str, args: Value) -> Value {
    let python = std::env::var("PAYGATE_TEST_PYTHON")
        .expect("PAYGATE_TEST_PYTHON must name the venv's python (run via `make test`)");
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/x402_mcp_pay.py"
    ))
    .arg(url)
    .arg(KEYS[payer])
    .arg(tool)
    .arg(args.to_string());
    run_client(cmd).await
}

#[tokio::test]
async fn any_agent_lists_prices_pays_and_gets_the_result_once() {
    let (chain, gw, upstream, key) = acme().await;
    let input_schema = json!({"type": "object", "properties": {"city": {"type": "string"}},
                              "required": ["city"]});
    gw.create_route(
        &key,
        json!({"path": "weather", "priceUSD": 0.02, "targetUrl": format!("{}/weather", upstream.url),
               "network": "base-sepolia", "description": "Weather by city", "publicTool": true,
               "inputSchema": input_schema, "mimeType": "application/json"}),
    )
    .await;
    // Not marked for the public endpoint: never listed there, nor callable.
    gw.create_paid_route(&key, "private", &format!("{}/p", upstream.url), false)
        .await;
    let before = (
        chain.balance(address(4)).await,
        chain.balance(address(RECEIVER)).await,
    );

    let r = pay_tool(
        &gw.url("/mcp/x402/acme"),
        4,
        "weather",
        json!({"body": {"city": "Lagos"}}),
    )
    .await;

    // Listed with its price and the route's own schema for the body.
    let tools = r["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "{r}");
    assert_eq!(tools[0]["name"], "weather");
    let description = tools[0]["description"].as_str().unwrap();
    assert!(
        description.contains("$0.02") && description.contains("eip155:84532"),
        "{description}"
    );
    assert_eq!(tools[0]["inputSchema"]["properties"]["body"], input_schema);

    // Unpaid: a tool error carrying the payment requirements.
    assert_eq!(r["unpaid"]["isError"], true, "{r}");
    let required = &r["unpaid"]["structuredContent"];
    assert_eq!(required["x402Version"], 2, "{r}");
    let accept = &required["accepts"][0];
    assert_eq!(accept["amount"], PRICE.to_string());
    assert_eq!(accept["network"], "eip155:84532");
    assert_eq!(
        accept["payTo"],
        json!(address(RECEIVER).to_checksum(None)),
        "{r}"
    );

    // Paid by the official x402 MCP client: the result and the settlement receipt.
    let paid = &r["paid"];
    assert_eq!(paid["isError"], false, "{r}");
    assert_eq!(paid["paymentMade"], true);
    let receipt = &paid["paymentResponse"];
    assert_eq!(receipt["success"], true, "{r}");
    assert_eq!(receipt["payer"], json!(address(4).to_checksum(None)));
    assert!(receipt["transaction"].as_str().unwrap().starts_with("0x"));
    assert_eq!(paid["structuredContent"]["status"], 200, "{r}");
    assert_eq!(paid["structuredContent"]["body"]["path"], "/weather");
    assert_eq!(
        paid["structuredContent"]["body"]["body"],
        json!({"city": "Lagos"}).to_string(),
        "{r}"
    );

    // The same payment sent again (a retry): refused, no second charge, no second call.
    let replay = &r["replay"];
    assert_eq!(replay["isError"], true, "{r}");
    assert_eq!(upstream.hits(), 1);
    assert_eq!(chain.balance(address(4)).await, before.0 - PRICE);
    assert_eq!(chain.balance(address(RECEIVER)).await, before.1 + PRICE);

    // The payment is in the seller's ledger like any other.
    let ledger: Value = gw
        .api(&key, reqwest::Method::GET, "/api/payments", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(ledger["payments"].as_array().unwrap().len(), 1, "{ledger}");
    assert_eq!(ledger["payments"][0]["status"], "SETTLED", "{ledger}");
}

/// A chain, a gateway on it, an origin, and the organisation `acme` paid to account
/// `RECEIVER`: its API key.
async fn acme() -> (Chain, Gateway, Upstream, String) {
    let chain = Chain::start();
    let gw = Gateway::start_with_owned(chain.gateway_env()).await;
    let upstream = Upstream::start().await;
    let (_, key) = gw
        .create_org("acme", Some(&address(RECEIVER).to_checksum(None)))
        .await;
    (chain, gw, upstream, key)
}

async fn call(gw: &Gateway, tool: &str, payment: Option<Value>) -> Value {
    call_with(gw, tool, json!({}), payment).await
}

async fn call_with(gw: &Gateway, tool: &str, arguments: Value, payment: Option<Value>) -> Value {
    let mut params = json!({"name": tool, "arguments": arguments});
    if let Some(p) = payment {
        params["_meta"] = json!({ "x402/payment": p });
    }
    mcp_x402_rpc(gw, "acme", "tools/call", params).await
}

/// Payments that cannot be taken get the requirements back and no API output, and move
/// nothing; a v1 payment pays too; unknown tools, unknown and suspended organisations list
/// nothing; a browser page of a foreign origin is refused.
#[tokio::test]
async fn refused_payments_answer_requirements_and_nothing_else() {
    let (chain, gw, upstream, key) = acme().await;
    let receiver = address(RECEIVER);
    gw.create_route(
        &key,
        json!({"path": "echo", "priceUSD": 0.02, "targetUrl": format!("{}/echo", upstream.url),
               "network": "base-sepolia", "publicTool": true}),
    )
    .await;
    let before = chain.balance(address(3)).await;

    let unpaid = call(&gw, "echo", None).await;
    assert_eq!(unpaid["isError"], true, "{unpaid}");
    let accepted = unpaid["structuredContent"]["accepts"][0].clone();
    // The text is the same requirements, for clients that read only text.
    let text: Value = serde_json::from_str(unpaid["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, unpaid["structuredContent"]);

    let refused = [
        // Signed by another key than the payer's.
        PaymentSpec {
            signer: Some(4),
            ..PaymentSpec::new(3, receiver, PRICE)
        }
        .v2_payload(&accepted),
        // Less than the price.
        PaymentSpec::new(3, receiver, PRICE - 1).v2_payload(&accepted),
        // To someone else.
        PaymentSpec::new(3, address(8), PRICE).v2_payload(&accepted),
        json!({"x402Version": 7}),
        json!("not a payload"),
    ];
    for p in refused {
        let r = call(&gw, "echo", Some(p.clone())).await;
        assert_eq!(r["isError"], true, "{p}: {r}");
        assert_eq!(r["structuredContent"]["x402Version"], 2, "{p}: {r}");
        assert!(r["structuredContent"]["error"].as_str().unwrap().len() > 5);
        assert!(r.get("_meta").is_none(), "{r}");
    }
    assert_eq!(upstream.hits(), 0);
    assert_eq!(chain.balance(address(3)).await, before);

    // A v1 payload pays as well; the receipt is in the result's `_meta`.
    let paid = call(
        &gw,
        "echo",
        Some(PaymentSpec::new(3, receiver, PRICE).v1_payload()),
    )
    .await;
    assert_eq!(paid["isError"], false, "{paid}");
    assert_eq!(paid["_meta"]["x402/payment-response"]["success"], true);
    assert_eq!(paid["structuredContent"]["body"]["path"], "/echo");
    assert_eq!(upstream.hits(), 1);
    assert_eq!(chain.balance(address(3)).await, before - PRICE);

    let unknown = call(&gw, "nope", None).await;
    assert!(unknown["message"]
        .as_str()
        .unwrap()
        .contains("unknown tool"));
    // An organisation that does not exist: 404 with a JSON error, not an empty tool list.
    let r = gw
        .http
        .post(gw.url("/mcp/x402/nobody"))
        .header("Accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}))
        .send()
        .await
        .unwrap();
    let (status, code, err) = error_of(r).await;
    assert_eq!((status, code.as_str()), (404, "NOT_FOUND"), "{err}");
    assert!(err["message"].as_str().unwrap().contains("nobody"), "{err}");

    let status = gw
        .admin(
            reqwest::Method::PATCH,
            "/admin/orgs/acme",
            Some(json!({ "suspended": true })),
        )
        .await
        .status();
    assert_eq!(status, 200);
    assert_eq!(
        mcp_x402_rpc(&gw, "acme", "tools/list", json!({})).await["tools"],
        json!([])
    );

    let foreign = gw
        .http
        .post(gw.url("/mcp/x402/acme"))
        .header("Origin", "https://evil.example")
        .header("Accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
}

/// An `auth-capture` tool over MCP (issue 44): the tool error carries the escrow terms, the
/// official npm client's signed hold pays, a served answer is captured, and a failing origin
/// voids the hold: the caller pays nothing for it.
#[tokio::test]
async fn an_escrowed_tool_is_captured_when_served_and_voided_when_not() {
    let (chain, gw, upstream, key) = acme().await;
    let receiver = address(RECEIVER);
    gw.create_route(
        &key,
        json!({"path": "report", "priceUSD": 0.01, "schemes": ["auth-capture"],
               "targetUrl": format!("{}/echo", upstream.url), "network": "base-sepolia",
               "publicTool": true}),
    )
    .await;
    let escrow = paygate_x402::auth_capture::ESCROW_ADDRESS;
    let payer = address(6);
    let before = (chain.balance(payer).await, chain.balance(receiver).await);

    let unpaid = call(&gw, "report", None).await;
    let required = unpaid["structuredContent"].clone();
    assert_eq!(required["accepts"][0]["scheme"], "auth-capture", "{unpaid}");
    assert_eq!(
        required["accepts"][0]["extra"]["authCaptureEscrow"],
        escrow.to_checksum(None),
        "{unpaid}"
    );
    let deadline = required["accepts"][0]["extra"]["captureDeadline"]
        .as_u64()
        .unwrap();
    assert!(deadline > paygate_domain::unix_now(), "{unpaid}");

    // Served: the hold is captured, the receipt says how much.
    let paid = call(&gw, "report", Some(escrow::signed_doc(&required, 6))).await;
    assert_eq!(paid["isError"], false, "{paid}");
    let receipt = &paid["_meta"]["x402/payment-response"];
    assert_eq!(receipt["success"], true, "{paid}");
    assert_eq!(receipt["amount"], "10000", "{paid}");
    assert_eq!(chain.balance(payer).await, before.0 - 10_000);
    assert_eq!(chain.balance(receiver).await, before.1 + 10_000);
    assert_eq!(chain.balance(escrow).await, 0, "nothing left held");

    // The origin fails: asked once, the hold voided, the caller charged nothing.
    let failing = call_with(
        &gw,
        "report",
        json!({"query": {"upstream_status": "500"}}),
        Some(escrow::signed_doc(&required, 6)),
    )
    .await;
    assert_eq!(failing["isError"], true, "{failing}");
    let text = failing["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("answered 500"), "{failing}");
    assert_eq!(upstream.hits(), 2);
    assert_eq!(chain.balance(payer).await, before.0 - 10_000, "voided");
    assert_eq!(chain.balance(receiver).await, before.1 + 10_000);
    assert_eq!(chain.balance(escrow).await, 0);
}
