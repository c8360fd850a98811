//! End-to-end: a route can only be paid on a network this deployment settles. Creation
//! refuses any other network (naming the settleable ones, as `/facilitator/supported` lists
//! them); a network whose RPC stops answering is a `503` before any challenge until it answers.

use crate::common;

use common::chain::{address, Chain, PaymentSpec};
use common::*;
use serde_json::{json, Value};

const PRICE: u64 = 10_000; // $0.01

#[tokio::test]
async fn a_deployment_without_a_facilitator_takes_no_route_but_keeps_its_sandbox() {
    // No relayer key and no remote facilitator: nothing settles.
    let gw = Gateway::start_or_exit(&[]).await.expect("it serves");
    let (_, key) = gw.create_org("acme", Some(WALLET_A)).await;
    let (status, code, err) = send_error(
        gw.http
            .post(gw.url("/api/routes"))
            .bearer_auth(&key)
            .json(&route_body("echo")),
    )
    .await;
    assert_eq!((status, code.as_str()), (400, "VALIDATION_ERROR"), "{err}");
    assert_eq!(err["details"][0]["field"], "network", "{err}");
    assert!(
        err["details"][0]["problem"]
            .as_str()
            .unwrap()
            .starts_with("no network can be settled by this deployment"),
        "{err}"
    );
    let (status, code, _) = error_of(gw.get("/facilitator/supported").await).await;
    assert_eq!((status, code.as_str()), (503, "FACILITATOR_UNAVAILABLE"));
    // The sandbox moves no money: it still offers its test payment.
    assert_eq!(gw.get("/gateway/demo/demo").await.status(), 402);
}

/// Polls the unpaid route until it answers `status` (the health probe runs every second).
async fn until_unpaid_answers(gw: &Gateway, status: u16) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let r = gw.get("/gateway/acme/echo").await;
        let got = r.status().as_u16();
        let body: Value = r.json().await.unwrap_or_default();
        if got == status {
            return body;
        }
        assert!(std::time::Instant::now() < deadline, "{got} {body}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_network_whose_rpc_stops_answering_is_a_503_before_any_challenge_until_it_answers() {
    let chain = Chain::start();
    let (mut gw, upstream, receiver) = gateway_with_echo(chain.gateway_env()).await;
    until_unpaid_answers(&gw, 402).await;
    // The same API offered to any agent as a paid MCP tool.
    let (_, tools_key) = gw.create_org("tools", Some(WALLET_A)).await;
    gw.create_route(
        &tools_key,
        json!({"path": "echo", "priceUSD": 0.01, "targetUrl": format!("{}/echo", upstream.url),
               "network": "base-sepolia", "publicTool": true}),
    )
    .await;
    let tool_call = json!({"name": "echo", "arguments": {}});
    let offered = mcp_x402_rpc(&gw, "tools", "tools/call", tool_call.clone()).await;
    assert!(
        offered["structuredContent"]["accepts"][0].is_object(),
        "{offered}"
    );
    // The chain's RPC goes away (the gateway now points at a port nothing listens on).
    let dead_rpc = format!("http://127.0.0.1:{}", free_port());
    let mut env = chain.gateway_env();
    env.push(("PAYGATE__NETWORKS__BASE-SEPOLIA__RPC_URL".into(), dead_rpc));
    env.push((
        "PAYGATE__FACILITATOR__REQUEST_TIMEOUT_SECONDS".into(),
        "2".into(),
    ));
    gw.set_env(env);
    gw.restart().await;
    // No challenge invites a payment that cannot settle: 503 before any 402.
    let body = until_unpaid_answers(&gw, 503).await;
    assert_eq!(body["code"], "FACILITATOR_UNAVAILABLE", "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("base-sepolia"),
        "{body}"
    );
    // A payment sent anyway is refused the same way before anything is taken; nothing moved,
    // and the same signed payment is not burnt.
    let spec = PaymentSpec::new(1, receiver, PRICE);
    for _ in 0..2 {
        let (status, code, _) = error_of(pay_v1(&gw, &spec).await).await;
        assert_eq!((status, code.as_str()), (503, "FACILITATOR_UNAVAILABLE"));
    }
    // The MCP tool is a tool error saying so, with no requirements to sign.
    let refused = mcp_x402_rpc(&gw, "tools", "tools/call", tool_call).await;
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(
        refused.get("structuredContent").is_none_or(Value::is_null),
        "{refused}"
    );
    assert!(
        refused["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("cannot be paid now"),
        "{refused}"
    );
    assert_eq!(upstream.hits(), 0);
    assert_eq!(chain.balance(address(1)).await, 1_000_000_000);
    // A new route on that network cannot be created now (503, try again), nor on one this
    // deployment does not settle (400, naming what it settles: nothing answers now).
    let (_, key) = gw.create_org("other", Some(WALLET_A)).await;
    let create = |body: Value| {
        gw.http
            .post(gw.url("/api/routes"))
            .bearer_auth(&key)
            .json(&body)
    };
    let (status, code, _) = send_error(create(route_body("new"))).await;
    assert_eq!((status, code.as_str()), (503, "FACILITATOR_UNAVAILABLE"));
    let mut on_base = route_body("new");
    on_base["network"] = json!("base");
    let (status, code, err) = send_error(create(on_base)).await;
    assert_eq!((status, code.as_str()), (400, "VALIDATION_ERROR"), "{err}");
    assert!(
        err["details"][0]["problem"]
            .as_str()
            .unwrap()
            .starts_with("no network can be settled by this deployment now"),
        "{err}"
    );
    let health = gw.org_metrics(&key, "24h").await["facilitator"].clone();
    assert_eq!(health["status"], "down", "{health}");
    // The RPC answers again: the route is offered and paid as before.
    gw.set_env(chain.gateway_env());
    gw.restart().await;
    until_unpaid_answers(&gw, 402).await;
    let r = pay_v1(&gw, &spec).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(upstream.hits(), 1);
    assert_eq!(chain.balance(address(1)).await, 1_000_000_000 - PRICE);
}
