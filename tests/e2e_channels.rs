//! Payment channels (x402 `batch-settlement`, issue 29) end to end: the official npm clients
//! (`@x402/fetch` with `@x402/evm`'s batch-settlement scheme) pay a route many times over one
//! deposit through the real binary on anvil; the seller claims and settles every voucher in one
//! transaction; the balances on chain add up exactly. `make test` sets the npm tree.

mod common;

use common::chain::{address, Chain, KEYS};
use common::upstream::Upstream;
use common::*;
use reqwest::Method;
use serde_json::{json, Value};

const MASTER_KEY: &str = "3a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6071829";
/// $0.001 a request.
const PRICE: u64 = 1_000;

async fn setup() -> (Chain, Gateway, Upstream, String) {
    let chain = Chain::start();
    let mut env = chain.gateway_env();
    env.push(("PAYGATE_MASTER_KEY".into(), MASTER_KEY.into()));
    let gw = Gateway::start_with_owned(env).await;
    let upstream = Upstream::start().await;
    let (_, key) = gw
        .create_org("acme", Some(&address(9).to_checksum(None)))
        .await;
    let route = gw
        .create_route(
            &key,
            json!({"path": "search", "priceUSD": "0.001", "network": "base-sepolia",
                   "targetUrl": format!("{}/search", upstream.url),
                   "schemes": ["exact", "batch-settlement"]}),
        )
        .await;
    assert_eq!(
        route["schemes"],
        json!(["exact", "batch-settlement"]),
        "{route}"
    );
    (chain, gw, upstream, key)
}

/// The official client's run of `n` requests to `query` on the route, in a process of its own
/// (a new process knows nothing of the channel but what the chain and the gateway tell it).
async fn channel_pay(gw: &Gateway, chain: &Chain, payer: usize, query: &str, n: usize) -> Value {
    let modules = std::env::var("PAYGATE_TEST_NODE_MODULES").expect(
        "PAYGATE_TEST_NODE_MODULES must name a node_modules with @x402/fetch (run via `make test`)",
    );
    let mut cmd = tokio::process::Command::new("node");
    cmd.env("NODE_PATH", modules)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/x402_channel_pay.cjs"
        ))
        .arg(gw.url(&format!("/gateway/acme/search{query}")))
        .arg(KEYS[payer])
        .arg(&chain.rpc)
        .arg(n.to_string());
    run_client(cmd).await
}

async fn channels(gw: &Gateway, key: &str) -> Value {
    gw.api(key, Method::GET, "/api/channels", None)
        .await
        .json()
        .await
        .unwrap()
}

/// The challenge offers both schemes, the channel one with the gateway's receiver authorizer
/// and withdraw delay and the token's EIP-712 domain, as the EVM scheme document says.
#[tokio::test]
async fn a_route_offers_channels_beside_exact() {
    let (_chain, gw, _up, _key) = setup().await;
    let r = gw.get("/gateway/acme/search").await;
    assert_eq!(r.status(), 402);
    let doc = paygate_x402::b64_json(r.headers()["payment-required"].to_str().unwrap()).unwrap();
    let accepts = doc["accepts"].as_array().unwrap();
    assert_eq!(accepts.len(), 2, "{doc}");
    assert_eq!(accepts[0]["scheme"], "exact");
    let b = &accepts[1];
    assert_eq!(b["scheme"], "batch-settlement");
    assert_eq!(b["amount"], PRICE.to_string());
    assert_eq!(b["payTo"], address(9).to_checksum(None));
    assert_eq!(b["extra"]["withdrawDelay"], 86_400);
    assert_eq!(b["extra"]["name"], "USDC");
    let authorizer = paygate_domain::secrets::receiver_authorizer_from_master(MASTER_KEY)
        .unwrap()
        .address();
    assert_eq!(
        b["extra"]["receiverAuthorizer"],
        authorizer.to_checksum(None)
    );
}

/// 1,000 requests over one deposit: every one served once and answered with the scheme's
/// payment response; the seller's claim covers them all in one transaction; the receiver gets
/// exactly 1,000 prices and the payer's deposit keeps the rest.
#[tokio::test]
async fn the_official_client_pays_a_thousand_requests_over_one_deposit() {
    const N: usize = 1_000;
    let (chain, gw, upstream, key) = setup().await;
    let (payer_before, receiver_before) = (
        chain.balance(address(6)).await,
        chain.balance(address(9)).await,
    );
    let report = channel_pay(&gw, &chain, 6, "", N).await;
    assert_eq!(report["statuses"]["200"], N, "{report}");
    assert_eq!(report["deposits"], 1, "one deposit: {report}");
    assert_eq!(
        report["charged"],
        (PRICE * N as u64).to_string(),
        "{report}"
    );
    let last = &report["receipts"][1];
    assert_eq!(
        last["transaction"], "",
        "a voucher moves nothing on chain: {report}"
    );
    assert_eq!(last["extra"]["chargedAmount"], PRICE.to_string());
    assert_eq!(upstream.hits(), N);
    let deposit = PRICE * N as u64;
    assert_eq!(chain.balance(address(6)).await, payer_before - deposit);

    let list = channels(&gw, &key).await;
    let c = &list["channels"][0];
    assert_eq!(c["requests"], N, "{list}");
    assert_eq!(c["charged"], deposit.to_string());
    assert_eq!(c["unclaimed"], deposit.to_string());
    assert_eq!(c["deposited"], deposit.to_string());

    let r = gw
        .api(&key, Method::POST, "/api/channels/claim", Some(json!({})))
        .await;
    assert_eq!(r.status(), 200);
    let claimed: Value = r.json().await.unwrap();
    assert_eq!(claimed["claimedChannels"], 1, "{claimed}");
    assert_eq!(chain.balance(address(9)).await, receiver_before + deposit);
    let list = channels(&gw, &key).await;
    let c = &list["channels"][0];
    assert_eq!(c["claimed"], deposit.to_string(), "{list}");
    assert_eq!(c["unclaimed"], "0");
    // Claiming again claims nothing and moves nothing.
    let again: Value = gw
        .api(&key, Method::POST, "/api/channels/claim", Some(json!({})))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(again["claimedChannels"], 0, "{again}");
    assert_eq!(chain.balance(address(9)).await, receiver_before + deposit);
}

/// Pricing by usage, a failed origin and a client that lost its state: the origin's stated
/// charge is what is charged (never seen by the caller); an answer of 500 charges nothing; a new
/// client process is told the channel's state by the corrective 402 and goes on from it.
#[tokio::test]
async fn usage_charges_failures_and_a_resync_keep_the_channel_exact() {
    let (chain, gw, upstream, key) = setup().await;
    // A payer without the USDC it signs a deposit for: the deposit fails on chain, nothing is
    // kept of the channel and nothing reaches the origin.
    let report = channel_pay(&gw, &chain, 7, "", 1).await;
    assert_eq!(report["statuses"]["402"], 1, "{report}");
    assert_eq!(channels(&gw, &key).await["channels"], json!([]));
    assert_eq!(upstream.hits(), 0);

    let report = channel_pay(&gw, &chain, 5, "?upstream_charge=250", 3).await;
    assert_eq!(report["statuses"]["200"], 3, "{report}");
    assert_eq!(report["charged"], "750", "{report}");
    assert_eq!(report["receipts"][1]["extra"]["chargedAmount"], "250");
    assert_eq!(report["chargeHeaderSeen"], false, "{report}");
    let c = &channels(&gw, &key).await["channels"][0];
    assert_eq!(
        (c["charged"].as_str(), c["requests"].as_u64()),
        (Some("750"), Some(3))
    );

    // A new client process: resynced by the corrective 402; the origin fails: nothing charged.
    let report = channel_pay(&gw, &chain, 5, "?upstream_status=500", 1).await;
    assert_eq!(report["statuses"]["500"], 1, "{report}");
    assert_eq!(
        report["receipts"],
        json!([]),
        "no receipt for a failed answer: {report}"
    );
    let c = &channels(&gw, &key).await["channels"][0];
    assert_eq!(
        (c["charged"].as_str(), c["requests"].as_u64()),
        (Some("750"), Some(3))
    );

    // And the channel goes on, at the full price when the origin says nothing.
    let report = channel_pay(&gw, &chain, 5, "", 1).await;
    assert_eq!(report["statuses"]["200"], 1, "{report}");
    assert_eq!(
        report["deposits"], 0,
        "the first deposit still covers it: {report}"
    );
    assert_eq!(report["charged"], (750 + PRICE).to_string(), "{report}");
    let c = &channels(&gw, &key).await["channels"][0];
    assert_eq!(c["requests"], 4);
    assert_eq!(upstream.hits(), 5, "every request reached the origin once");
}
