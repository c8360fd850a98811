//! The facilitator API paygate serves for other x402 servers (`/facilitator/*`), on a real chain,
//! and reconciliation of payments whose outcome a crash left unrecorded.

use crate::common;

use alloy_primitives::Address;
use common::chain::{self, address, Chain, PaymentSpec, USDC};
use common::escrow;
use common::upstream::Upstream;
use common::*;
use paygate_domain::model::{GatewayPayment, PaymentStatus};
use paygate_gateway::payments::reconcile::{reconcile_once, Leases};

fn leases() -> Leases {
    Leases {
        in_flight_secs: 60,
        live_hold_secs: 300,
    }
}
use paygate_store::prelude::*;
use paygate_store::{PaymentReservation, SledStore};
use paygate_x402::money::UsdcAmount;
use paygate_x402::network::{builtin_networks, Networks};
use paygate_x402::PaymentRequirements;
use reqwest::Method;
use serde_json::{json, Value};

const PRICE: u64 = 10_000;

fn v1_requirements(pay_to: Address, amount: u64) -> Value {
    json!({
        "scheme": "exact", "network": "base-sepolia", "maxAmountRequired": amount.to_string(),
        "resource": "https://seller.example/api", "description": "", "mimeType": "",
        "payTo": pay_to.to_checksum(None), "maxTimeoutSeconds": 60, "asset": USDC,
        "extra": {"name": "USDC", "version": "2"},
    })
}

fn v2_requirements(pay_to: Address, amount: u64) -> Value {
    json!({
        "scheme": "exact", "network": "eip155:84532", "amount": amount.to_string(),
        "payTo": pay_to.to_checksum(None), "maxTimeoutSeconds": 60, "asset": USDC,
        "extra": {"name": "USDC", "version": "2"},
    })
}

async fn call(gw: &Gateway, key: &str, op: &str, body: Value) -> (u16, Value) {
    let r = gw
        .api(key, Method::POST, &format!("/facilitator/{op}"), Some(body))
        .await;
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn serves_verify_settle_and_supported_to_other_x402_servers() {
    let chain = Chain::start();
    let gw = Gateway::start_with_owned(chain.gateway_env()).await;
    let (_, key) = gw.create_org("seller", None).await;
    let seller = address(8);
    let payer = address(2);

    // supported: public, both protocol versions of the configured chain.
    let r = gw.get("/facilitator/supported").await;
    assert_eq!(r.status(), 200);
    let kinds: Value = r.json().await.unwrap();
    let kinds = kinds["kinds"].as_array().unwrap().clone();
    assert!(
        kinds.contains(&json!({"x402Version": 1, "scheme": "exact", "network": "base-sepolia"}))
    );
    assert!(
        kinds.contains(&json!({"x402Version": 2, "scheme": "exact", "network": "eip155:84532"}))
    );

    let spec = PaymentSpec::new(2, seller, PRICE);
    let body = json!({"x402Version": 1, "paymentPayload": spec.v1_payload(),
                      "paymentRequirements": v1_requirements(seller, PRICE)});

    // verify and settle need an API key (the relayer pays gas); a non-request is a 400.
    let (status, err) = call(&gw, "pk_wrong.key", "verify", body.clone()).await;
    assert_eq!((status, err["code"].as_str()), (401, Some("UNAUTHORIZED")));
    let (status, err) = call(&gw, &key, "settle", json!({"hello": 1})).await;
    assert_eq!((status, err["code"].as_str()), (400, Some("BAD_REQUEST")));
    assert!(err["requestId"].is_string());

    let (payer_before, seller_before) = (chain.balance(payer).await, chain.balance(seller).await);
    let (status, v) = call(&gw, &key, "verify", body.clone()).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["isValid"], true, "{v}");
    assert_eq!(v["payer"], json!(payer.to_checksum(None)));
    assert_eq!(
        chain.balance(payer).await,
        payer_before,
        "verify moves nothing"
    );

    // A requirement the payment does not satisfy: invalid, with the x402 reason.
    let wrong = json!({"x402Version": 1, "paymentPayload": spec.v1_payload(),
                       "paymentRequirements": v1_requirements(seller, PRICE * 2)});
    let (status, v) = call(&gw, &key, "verify", wrong.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(v["isValid"], false);
    assert_eq!(
        v["invalidReason"],
        "invalid_exact_evm_payload_authorization_value"
    );
    let (_, s) = call(&gw, &key, "settle", wrong).await;
    assert_eq!(s["success"], false);
    assert_eq!(chain.balance(payer).await, payer_before);

    let (status, s) = call(&gw, &key, "settle", body.clone()).await;
    assert_eq!(status, 200, "{s}");
    assert_eq!(s["success"], true, "{s}");
    assert_eq!(s["network"], "base-sepolia");
    assert!(s["transaction"].as_str().unwrap().starts_with("0x"));
    assert_eq!(chain.balance(payer).await, payer_before - PRICE);
    assert_eq!(chain.balance(seller).await, seller_before + PRICE);

    // The same authorization again: refused, nothing moves.
    let (_, s) = call(&gw, &key, "settle", body).await;
    assert_eq!(s["success"], false);
    assert_eq!(s["errorReason"], "nonce_already_used");
    assert_eq!(chain.balance(payer).await, payer_before - PRICE);

    // v2 spelling.
    let req = v2_requirements(seller, PRICE);
    let spec = PaymentSpec::new(2, seller, PRICE);
    let body = json!({"x402Version": 2, "paymentPayload": spec.v2_payload(&req),
                      "paymentRequirements": req});
    let (_, s) = call(&gw, &key, "settle", body).await;
    assert_eq!(s["success"], true, "{s}");
    assert_eq!(s["network"], "eip155:84532");
    assert_eq!(chain.balance(payer).await, payer_before - 2 * PRICE);

    // Another token's domain is never used to check a signature.
    let mut foreign = v1_requirements(seller, PRICE);
    foreign["asset"] = json!("0x0000000000000000000000000000000000000001");
    let spec = PaymentSpec::new(2, seller, PRICE);
    let (_, v) = call(
        &gw,
        &key,
        "verify",
        json!({"x402Version": 1, "paymentPayload": spec.v1_payload(), "paymentRequirements": foreign}),
    )
    .await;
    assert_eq!(v["invalidReason"], "invalid_payment_requirements");

    // `auth-capture` is served for another server with the deployment as the escrow's
    // operator (`facilitator_ways.rs` pays it); an escrow payment naming another operator is
    // refused with the scheme's reason word, nothing held.
    assert!(
        kinds.iter().any(|k| k["scheme"] == "auth-capture"),
        "{kinds:?}"
    );
    let now = paygate_domain::unix_now();
    let escrowed = json!({
        "scheme": "auth-capture", "network": "eip155:84532", "amount": PRICE.to_string(),
        "payTo": seller.to_checksum(None), "maxTimeoutSeconds": 60, "asset": USDC,
        "extra": {"name": "USDC", "version": "2",
            "authCaptureEscrow": paygate_x402::auth_capture::ESCROW_ADDRESS.to_checksum(None),
            "captureAuthorizer": address(7).to_checksum(None),
            "feeRecipient": address(7).to_checksum(None), "minFeeBps": 0, "maxFeeBps": 0,
            "captureDeadline": now + 900, "refundDeadline": now + 900},
    });
    let doc = escrow::signed_doc(
        &json!({"accepts": [escrowed], "resource": {"url": "https://seller.example/r"}}),
        2,
    );
    let body = json!({"x402Version": 2, "paymentPayload": doc, "paymentRequirements": escrowed});
    let held_before = chain.balance(payer).await;
    let (status, v) = call(&gw, &key, "verify", body.clone()).await;
    assert_eq!(
        (status, &v["invalidReason"]),
        (200, &json!("invalid_payment_requirements")),
        "{v}"
    );
    let (status, s) = call(&gw, &key, "settle", body).await;
    assert_eq!((status, &s["success"]), (200, &json!(false)), "{s}");
    assert_eq!(s["errorReason"], "invalid_payment_requirements", "{s}");
    assert_eq!(chain.balance(payer).await, held_before);
}

/// Moves `spec`'s money on the chain through a gateway of its own (its own store, stopped
/// afterwards): a transfer that landed while the store under test recorded nothing of it.
async fn settle_elsewhere(chain: &Chain, seller: Address, spec: &PaymentSpec) {
    let gw = Gateway::start_with_owned(chain.gateway_env()).await;
    let (_, key) = gw.create_org("elsewhere", None).await;
    let (_, s) = call(
        &gw,
        &key,
        "settle",
        json!({"x402Version": 1, "paymentPayload": spec.v1_payload(),
               "paymentRequirements": v1_requirements(seller, PRICE)}),
    )
    .await;
    assert_eq!(s["success"], true, "{s}");
}

fn local_requirements(chain: &Chain, pay_to: Address) -> PaymentRequirements {
    let mut nets = builtin_networks();
    nets.get_mut("base-sepolia").unwrap().rpc_url = chain.rpc.clone();
    PaymentRequirements {
        network: Networks::from_config(&nets)
            .resolve("base-sepolia")
            .unwrap()
            .clone(),
        amount: UsdcAmount(PRICE),
        pay_to,
        resource: String::new(),
        description: String::new(),
        mime_type: String::new(),
        max_timeout_seconds: 60,
        token: Default::default(),
    }
}

#[tokio::test]
async fn reconciliation_decides_unrecorded_payments_from_the_chain() {
    let chain = Chain::start();
    let seller = address(8);
    let req = local_requirements(&chain, seller);
    let mut nets = builtin_networks();
    nets.get_mut("base-sepolia").unwrap().rpc_url = chain.rpc.clone();
    let networks = Networks::from_config(&nets);

    // 1. Settled on-chain (through the gateway's facilitator API), but the record still says
    //    Reserved, as a crash right after broadcasting leaves it.
    let landed = PaymentSpec::new(3, seller, PRICE);
    settle_elsewhere(&chain, seller, &landed).await;

    // 2. Never sent, and its authorization has expired: it can never land.
    let mut expired = PaymentSpec::new(3, seller, PRICE);
    expired.valid_before = chain::now() - 5;
    // 3. Never sent, still valid: a transaction might still land, so it waits.
    let pending = PaymentSpec::new(3, seller, PRICE);

    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path()).unwrap();
    let mut ids = Vec::new();
    for spec in [&landed, &expired, &pending] {
        let p = GatewayPayment::reserved("org", "rt", &req, &spec.authorization(), 0);
        assert_eq!(
            store.reserve_payment(&p).await.unwrap(),
            PaymentReservation::Reserved
        );
        ids.push(p.id);
    }

    // All three were created "before this process started".
    let started = time::OffsetDateTime::now_utc();
    let report = reconcile_once(&store, None, &networks, None, started, leases())
        .await
        .unwrap();
    assert_eq!((report.settled, report.failed, report.waiting), (1, 1, 1));
    let status = |i: usize| {
        let store = &store;
        let id = ids[i].clone();
        async move { store.get_payment(&id).await.unwrap().unwrap().status }
    };
    assert_eq!(status(0).await, PaymentStatus::Settled);
    assert_eq!(status(1).await, PaymentStatus::Failed);
    assert_eq!(status(2).await, PaymentStatus::Reserved);
    // The expired one keeps its nonce reserved: it cannot be replayed through the gateway.
    let again = GatewayPayment::reserved("org", "rt", &req, &expired.authorization(), 0);
    assert!(matches!(
        store.reserve_payment(&again).await.unwrap(),
        PaymentReservation::Held(_)
    ));

    // A payment of this process that is still in flight is not touched.
    let fresh = PaymentSpec::new(3, seller, PRICE);
    let p = GatewayPayment::reserved("org", "rt", &req, &fresh.authorization(), 0);
    assert_eq!(
        store.reserve_payment(&p).await.unwrap(),
        PaymentReservation::Reserved
    );
    let report = reconcile_once(
        &store,
        None,
        &networks,
        None,
        time::OffsetDateTime::UNIX_EPOCH,
        leases(),
    )
    .await
    .unwrap();
    assert_eq!(report.settled + report.failed, 0);
    assert_eq!(
        store.get_payment(&p.id).await.unwrap().unwrap().status,
        PaymentStatus::Reserved
    );
}

/// What a crash during settlement leaves behind, through the binary: two payments reserved by a
/// request that died, one of whose transfers landed. After the restart, reconciliation finds it
/// settled, and the client's retry of that same signed payment is served, once: a second retry
/// is a replay. A retry of the one that never landed (still valid, so it could still land) is
/// told to wait (`504 SETTLEMENT_PENDING`), never to pay again.
#[tokio::test]
async fn a_retry_is_served_once_on_a_payment_reconciliation_found_settled() {
    let chain = Chain::start();
    let upstream = Upstream::start().await;
    let seller = address(8);
    let mut env = chain.gateway_env();
    env.push((
        "PAYGATE__FACILITATOR__RECONCILE_INTERVAL_SECONDS".into(),
        "1".into(),
    ));
    let mut gw = Gateway::start_with_owned(env).await;
    let (org, key) = gw.create_org("acme", Some(&seller.to_checksum(None))).await;
    gw.create_paid_route(&key, "/echo", &format!("{}/echo", upstream.url), false)
        .await;
    let route_id = gw.route_id(&key, "/echo").await;

    let landed = PaymentSpec::new(3, seller, PRICE);
    settle_elsewhere(&chain, seller, &landed).await;

    // The reservations the dead request left in this gateway's store.
    let never_sent = PaymentSpec::new(4, seller, PRICE);
    assert!(gw.stop());
    {
        let store = gw.store().await;
        let req = local_requirements(&chain, seller);
        for spec in [&landed, &never_sent] {
            let org_id = org["id"].as_str().unwrap();
            let p = GatewayPayment::reserved(org_id, &route_id, &req, &spec.authorization(), 0);
            assert_eq!(
                store.reserve_payment(&p).await.unwrap(),
                PaymentReservation::Reserved
            );
        }
    }
    gw.restart().await;
    let retry = |spec: &PaymentSpec| {
        gw.http
            .get(gw.url("/gateway/acme/echo"))
            .header("X-PAYMENT", spec.v1_header())
    };

    let (status, code, _) = send_error(retry(&never_sent)).await;
    assert_eq!((status, code.as_str()), (504, "SETTLEMENT_PENDING"));
    // The facilitator API answers a held nonce as the gateway does: wait, never pay again.
    let body = json!({"x402Version": 1, "paymentPayload": never_sent.v1_payload(),
                      "paymentRequirements": v1_requirements(seller, PRICE)});
    let (status, err) = call(&gw, &key, "settle", body).await;
    assert_eq!(
        (status, err["code"].as_str()),
        (504, Some("SETTLEMENT_PENDING")),
        "{err}"
    );

    // The first reconciliation pass runs at start; until it has, the answer is "wait".
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let served = loop {
        let r = retry(&landed).send().await.unwrap();
        if r.status() == 200 || std::time::Instant::now() > deadline {
            break r;
        }
        let (status, code, _) = error_of(r).await;
        assert_eq!((status, code.as_str()), (504, "SETTLEMENT_PENDING"));
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(served.status(), 200, "{}", gw.log());
    let receipt = receipt(&served, "x-payment-response");
    assert_eq!(receipt["success"], true, "{receipt}");
    // Reconciliation knows the transfer happened, not which transaction made it.
    assert_eq!(receipt["transaction"], "", "{receipt}");
    assert_eq!(upstream.hits(), 1);

    // Served once: the same payment again is a replay, and nothing reaches the upstream.
    let (status, code, _) = send_error(retry(&landed)).await;
    assert_eq!((status, code.as_str()), (402, "NONCE_REPLAY"));
    assert_eq!(upstream.hits(), 1);
    assert_eq!(chain.balance(seller).await, PRICE);
}

/// Organisation `acme` (receiver: account 7) with its paid route `/echo` (0.01 USD on Base
/// Sepolia) to a new upstream: the upstream, the receiver and the org's key.
async fn acme_echo(gw: &Gateway) -> (Upstream, Address, String) {
    let upstream = Upstream::start().await;
    let seller = address(7);
    let (_, key) = gw.create_org("acme", Some(&seller.to_checksum(None))).await;
    gw.create_route(
        &key,
        json!({"path": "echo", "priceUSD": 0.01, "targetUrl": format!("{}/echo", upstream.url),
               "network": "base-sepolia"}),
    )
    .await;
    (upstream, seller, key)
}

/// Gateway A settles through the remote facilitator client against gateway B's served API:
/// both ends of the standard facilitator protocol, with a bearer token, on a real chain.
#[tokio::test]
async fn a_gateway_settles_through_a_remote_facilitator() {
    let chain = Chain::start();
    let facilitator = Gateway::start_with_owned(chain.gateway_env()).await;
    let (_, fkey) = facilitator.create_org("relay-customer", None).await;

    let gw = Gateway::start_with_owned(remote_facilitator_env(&facilitator, fkey)).await;
    let (upstream, seller, _) = acme_echo(&gw).await;

    let before = (chain.balance(address(4)).await, chain.balance(seller).await);
    let spec = PaymentSpec::new(4, seller, PRICE);
    let pay = || {
        gw.http
            .get(gw.url("/gateway/acme/echo"))
            .header("X-PAYMENT", spec.v1_header())
            .send()
    };
    let r = pay().await.unwrap();
    assert_eq!(r.status(), 200, "{}", gw.log());
    assert!(r.headers().contains_key("x-payment-response"));
    assert_eq!(upstream.hits(), 1);
    assert_eq!(chain.balance(address(4)).await, before.0 - PRICE);
    assert_eq!(chain.balance(seller).await, before.1 + PRICE);

    // Replay: refused by A's own guard before it reaches the facilitator.
    let r = pay().await.unwrap();
    assert_eq!(r.status(), 402);
    assert_eq!(upstream.hits(), 1);

    // A payer without funds: the remote facilitator's rejection becomes a 402, nothing served.
    let broke = PaymentSpec::new(8, seller, PRICE);
    let r = gw
        .http
        .get(gw.url("/gateway/acme/echo"))
        .header("X-PAYMENT", broke.v1_header())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 402);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "insufficient_funds", "{body}");
    assert_eq!(upstream.hits(), 1);
}

/// Base Sepolia with two facilitators (issue 31): a second paygate (remote, with a bearer token
/// and a fee), then this gateway's own embedded one. Payments settle through the remote one
/// while it answers; it is stopped mid-run and the next payment goes through the embedded one,
/// the chain moving each payment once. `/facilitator/supported` says which one served.
#[tokio::test]
async fn payments_fail_over_from_a_stopped_remote_facilitator_to_the_embedded_one() {
    let chain = Chain::start();
    let mut remote = Gateway::start_with_owned(chain.gateway_env()).await;
    let (_, fkey) = remote.create_org("relay-customer", None).await;
    let mut env: Vec<(String, String)> = chain
        .gateway_env()
        .into_iter()
        .filter(|(k, _)| k != "PAYGATE_RELAYER_KEY")
        .collect();
    let list = format!(
        r#"[{{url="{}", auth_header_env="FACILITATOR_TOKEN", fee="0.001"}}, {{url="embedded"}}]"#,
        remote.url("/facilitator")
    );
    for (k, v) in [
        // This gateway's own relayer: another account than the remote's.
        ("PAYGATE_RELAYER_KEY", chain::KEYS[6].to_string()),
        ("PAYGATE__NETWORKS__BASE-SEPOLIA__FACILITATORS", list),
        ("FACILITATOR_TOKEN", fkey),
        ("PAYGATE__METRICS__PROBE_INTERVAL_SECONDS", "1".into()),
    ] {
        env.push((k.into(), v));
    }
    let gw = Gateway::start_with_owned(env).await;
    let (upstream, seller, key) = acme_echo(&gw).await;
    let pay = |payer: usize| {
        let spec = PaymentSpec::new(payer, seller, PRICE);
        gw.http
            .get(gw.url("/gateway/acme/echo"))
            .header("X-PAYMENT", spec.v1_header())
            .send()
    };
    // Which facilitator served, as `/facilitator/supported` reports after a probe.
    let served_until = |want: [u64; 2]| {
        let gw = &gw;
        async move {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                let s: Value = gw.get("/facilitator/supported").await.json().await.unwrap();
                let settled: Vec<u64> = s["facilitators"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|f| f["settled"].as_u64()).collect())
                    .unwrap_or_default();
                if settled == want || std::time::Instant::now() > deadline {
                    return s;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    };
    let before = chain.balance(seller).await;

    let r = pay(4).await.unwrap();
    assert_eq!(r.status(), 200, "{}", gw.log());
    let s = served_until([1, 0]).await;
    assert_eq!(
        s["facilitators"][0]["url"],
        remote.url("/facilitator"),
        "{s}"
    );
    assert_eq!(s["facilitators"][0]["healthy"], true, "{s}");
    assert_eq!(s["facilitators"][1]["url"], "embedded:base-sepolia", "{s}");

    // The remote facilitator goes away: the next payment is verified and settled by the
    // embedded one, and the remote one shows down.
    assert!(remote.stop());
    let r = pay(3).await.unwrap();
    assert_eq!(r.status(), 200, "{}", gw.log());
    let s = served_until([1, 1]).await;
    assert_eq!(s["facilitators"][1]["settled"], 1, "{s}");
    assert_eq!(s["facilitators"][0]["healthy"], false, "{s}");
    assert_eq!(upstream.hits(), 2);
    assert_eq!(chain.balance(seller).await, before + 2 * PRICE);
    // The console's overview says the same.
    let m = gw.org_metrics(&key, "24h").await;
    assert_eq!(m["facilitator"]["facilitators"][1]["settled"], 1, "{m}");
}

/// A settlement that outlives its request (issue 44, item 7): the chain does not confirm the
/// transfer within the gateway's settle timeout (anvil's automine off). The payer is told
/// `504 SETTLEMENT_PENDING` with the receipt header in x402's pending form (`success: false`,
/// `errorReason: "settlement_pending"`, the transaction sent), never a `402`; another server
/// settling through `/facilitator/settle` gets x402's `settlement_pending` answer with the
/// transaction. Once the block is mined, reconciliation records both, each payment's retry is
/// served (or answered) once with that transaction, and nothing is sent twice.
#[tokio::test]
async fn a_settlement_not_confirmed_in_time_is_pending_then_finished_once() {
    use alloy_provider::Provider;
    let chain = Chain::start();
    let upstream = Upstream::start().await;
    let seller = address(8);
    let mut env = chain.gateway_env();
    env.push((
        "PAYGATE__FACILITATOR__SETTLE_TIMEOUT_SECONDS".into(),
        "2".into(),
    ));
    env.push((
        "PAYGATE__FACILITATOR__RECONCILE_INTERVAL_SECONDS".into(),
        "1".into(),
    ));
    // Reconciliation leaves this process's payments to their requests for settle + 2 RPC
    // timeouts + 5 s: 9 s here.
    env.push((
        "PAYGATE__FACILITATOR__REQUEST_TIMEOUT_SECONDS".into(),
        "1".into(),
    ));
    let gw = Gateway::start_with_owned(env).await;
    let (_, key) = gw.create_org("acme", Some(&seller.to_checksum(None))).await;
    gw.create_paid_route(&key, "/echo", &format!("{}/echo", upstream.url), false)
        .await;
    let seller_before = chain.balance(seller).await;
    let p = chain.provider(0);
    let _: Value = p
        .raw_request("evm_setAutomine".into(), (false,))
        .await
        .unwrap();

    let spec = PaymentSpec::new(3, seller, PRICE);
    let pay = || {
        gw.http
            .get(gw.url("/gateway/acme/echo"))
            .header("X-PAYMENT", spec.v1_header())
    };
    let r = pay().send().await.unwrap();
    let pending = receipt(&r, "x-payment-response");
    let (status, code, _) = error_of(r).await;
    assert_eq!((status, code.as_str()), (504, "SETTLEMENT_PENDING"));
    assert_eq!(pending["success"], false, "{pending}");
    assert_eq!(pending["errorReason"], "settlement_pending", "{pending}");
    let sent = pending["transaction"].as_str().unwrap().to_string();
    assert_eq!(sent.len(), 66, "{pending}");
    assert_eq!(
        upstream.hits(),
        0,
        "nothing served on an unconfirmed payment"
    );
    // Its retry before the block: the same transaction, nothing sent again.
    let r = pay().send().await.unwrap();
    assert_eq!(receipt(&r, "x-payment-response")["transaction"], sent);
    assert_eq!(r.status(), 504);

    // Another server's payment through the facilitator API: x402's pending answer.
    let other = PaymentSpec::new(4, seller, PRICE);
    let body = json!({"x402Version": 1, "paymentPayload": other.v1_payload(),
                      "paymentRequirements": v1_requirements(seller, PRICE)});
    let (status, s) = call(&gw, &key, "settle", body.clone()).await;
    assert_eq!(status, 200, "{s}");
    assert_eq!(s["success"], false, "{s}");
    assert_eq!(s["errorReason"], "settlement_pending", "{s}");
    let other_sent = s["transaction"].as_str().unwrap().to_string();
    assert_eq!(other_sent.len(), 66, "{s}");

    // The block: both land; reconciliation records them with their transactions.
    let _: Value = p.raw_request("evm_mine".into(), ()).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let served = loop {
        let r = pay().send().await.unwrap();
        if r.status() == 200 || std::time::Instant::now() > deadline {
            break r;
        }
        assert_eq!(r.status(), 504);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(served.status(), 200, "{}", gw.log());
    let done = receipt(&served, "x-payment-response");
    assert_eq!(
        (&done["success"], &done["transaction"]),
        (&json!(true), &json!(sent))
    );
    assert_eq!(upstream.hits(), 1);
    // The other server's retry: pending (the same transaction) until its record is decided.
    let s = loop {
        let (status, s) = call(&gw, &key, "settle", body.clone()).await;
        assert_eq!(status, 200, "{s}");
        if s["success"] == true || std::time::Instant::now() > deadline {
            break s;
        }
        assert_eq!(s["transaction"], json!(other_sent), "{s}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(
        (&s["success"], &s["transaction"]),
        (&json!(true), &json!(other_sent)),
        "{s}"
    );
    // Served once; each moved once.
    let (status, code, _) = send_error(pay()).await;
    assert_eq!((status, code.as_str()), (402, "NONCE_REPLAY"));
    assert_eq!(chain.balance(seller).await, seller_before + 2 * PRICE);
}

/// Behind a remote facilitator that answers x402's `settlement_pending` (gateway B, its chain
/// not mining), gateway A asks once more with the same payment, as x402's servers do (B answers
/// from the transaction it sent: nothing is sent twice), then tells its payer `504
/// SETTLEMENT_PENDING` with that transaction, never a `402`; nothing is served.
#[tokio::test]
async fn a_remote_facilitators_pending_settlement_is_pending_here_too() {
    use alloy_provider::Provider;
    let chain = Chain::start();
    let mut env = chain.gateway_env();
    env.push((
        "PAYGATE__FACILITATOR__SETTLE_TIMEOUT_SECONDS".into(),
        "2".into(),
    ));
    let facilitator = Gateway::start_with_owned(env).await;
    let (_, fkey) = facilitator.create_org("relay-customer", None).await;
    let gw = Gateway::start_with_owned(remote_facilitator_env(&facilitator, fkey)).await;
    let (upstream, seller, _) = acme_echo(&gw).await;
    let p = chain.provider(0);
    let _: Value = p
        .raw_request("evm_setAutomine".into(), (false,))
        .await
        .unwrap();
    let spec = PaymentSpec::new(4, seller, PRICE);
    let r = gw
        .http
        .get(gw.url("/gateway/acme/echo"))
        .header("X-PAYMENT", spec.v1_header())
        .send()
        .await
        .unwrap();
    let pending = receipt(&r, "x-payment-response");
    let (status, code, _) = error_of(r).await;
    assert_eq!(
        (status, code.as_str()),
        (504, "SETTLEMENT_PENDING"),
        "{}",
        gw.log()
    );
    assert_eq!(pending["errorReason"], "settlement_pending", "{pending}");
    assert_eq!(upstream.hits(), 0);
    // One transaction in B's pool: the retry was answered from it.
    let pool: Value = p.raw_request("txpool_content".into(), ()).await.unwrap();
    let sent: Vec<String> = pool["pending"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|by_nonce| by_nonce.as_object().unwrap().values())
        .map(|tx| tx["hash"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sent, [pending["transaction"].as_str().unwrap()], "{pool}");
}
