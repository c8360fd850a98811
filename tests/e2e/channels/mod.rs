//! Payment channels (x402 `batch-settlement`, issue 29) end to end: the official npm clients
//! (`@x402/fetch` with `@x402/evm`'s batch-settlement scheme) pay a route many times over one
//! deposit through the real binary on anvil; the seller claims and settles every voucher in one
//! transaction; the balances on chain add up exactly. `make test` sets the npm tree.

use crate::common;

use alloy_primitives::B256;
use alloy_sol_types::SolCall;
use common::chain::{address, Chain, KEYS};
use common::channel::{self, HandPayer};
use common::upstream::Upstream;
use common::webhook_receiver::{register, signed_by, Receiver};
use common::*;
use paygate_x402::batch::{IBatchSettlement, SETTLEMENT_ADDRESS};
use reqwest::Method;
use serde_json::{json, Value};

mod other_payers;

const MASTER_KEY: &str = "3a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6071829";
/// $0.001 a request.
const PRICE: u64 = 1_000;

async fn setup() -> (Chain, Gateway, Upstream, String) {
    setup_with(&[]).await
}

/// [`setup`] with more of the gateway's environment.
async fn setup_with(extra: &[(&str, &str)]) -> (Chain, Gateway, Upstream, String) {
    let chain = Chain::start();
    let mut env = chain.gateway_env();
    env.push(("PAYGATE_MASTER_KEY".into(), MASTER_KEY.into()));
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
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
async fn channel_pay(
    gw: &Gateway,
    chain: &Chain,
    payer: usize,
    query: &str,
    n: usize,
    then: Option<&str>,
) -> Value {
    let path = format!("/gateway/acme/search{query}");
    channel_pay_at(gw, chain, payer, &path, n, then).await
}

/// [`channel_pay`] to the route at `path` (and query).
async fn channel_pay_at(
    gw: &Gateway,
    chain: &Chain,
    payer: usize,
    path: &str,
    n: usize,
    then: Option<&str>,
) -> Value {
    common::channel::official_pay(&gw.url(path), payer, &chain.rpc, n, 1, then).await
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
    // The seller's claim below is the one that claims: the elected claimer's own pass would
    // claim the channel as soon as its charge reaches the default threshold (1 USDC, which
    // these 1,000 requests reach), at a moment of its own.
    let (chain, gw, upstream, key) =
        setup_with(&[("PAYGATE__CHANNELS__CLAIM_MIN_BASE_UNITS", "1000000000")]).await;
    let (payer_before, receiver_before) = (
        chain.balance(address(6)).await,
        chain.balance(address(9)).await,
    );
    let report = channel_pay(&gw, &chain, 6, "", N, None).await;
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
    assert!(last.get("amount").is_none(), "{last}");
    let deposit = PRICE * N as u64;
    // The first answer's receipt carries the deposit: its transaction and what it moved.
    let first = &report["receipts"][0];
    assert_eq!(first["amount"], deposit.to_string(), "{first}");
    assert_eq!(
        first["transaction"].as_str().map(str::len),
        Some(66),
        "{first}"
    );
    assert_eq!(upstream.hits(), N);
    assert_eq!(chain.balance(address(6)).await, payer_before - deposit);

    let list = channels(&gw, &key).await;
    let c = &list["channels"][0];
    assert_eq!(c["requests"], N, "{list}");
    assert_eq!(c["charged"], deposit.to_string());
    assert_eq!(c["unclaimed"], deposit.to_string());
    assert_eq!(c["deposited"], deposit.to_string());

    let claimed = gw.claim_channels(&key).await;
    assert_eq!(claimed["claimedChannels"], 1, "{claimed}");
    assert_eq!(chain.balance(address(9)).await, receiver_before + deposit);
    let list = channels(&gw, &key).await;
    let c = &list["channels"][0];
    assert_eq!(c["claimed"], deposit.to_string(), "{list}");
    assert_eq!(c["unclaimed"], "0");
    // Claiming again claims nothing and moves nothing.
    let again = gw.claim_channels(&key).await;
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
    let report = channel_pay(&gw, &chain, 7, "", 1, None).await;
    assert_eq!(report["statuses"]["402"], 1, "{report}");
    assert_eq!(channels(&gw, &key).await["channels"], json!([]));
    assert_eq!(upstream.hits(), 0);

    // A fixed-price route charges its price whatever the origin states (and hides the header).
    let report = channel_pay(&gw, &chain, 5, "?upstream_charge=0.00025", 1, None).await;
    assert_eq!(report["statuses"]["200"], 1, "{report}");
    assert_eq!(report["charged"], "1000", "{report}");
    assert_eq!(report["chargeHeaderSeen"], false, "{report}");

    // Priced by usage: the origin's stated charge (decimal USD), never seen by the caller.
    let id = gw.route_id(&key, "/search").await;
    let r = gw
        .api(
            &key,
            reqwest::Method::PATCH,
            &format!("/api/routes/{id}"),
            Some(json!({"pricing": "usage"})),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["pricing"], "usage");
    let report = channel_pay(&gw, &chain, 5, "?upstream_charge=0.00025", 3, None).await;
    assert_eq!(report["statuses"]["200"], 3, "{report}");
    assert_eq!(report["charged"], "1750", "{report}");
    assert_eq!(report["receipts"][1]["extra"]["chargedAmount"], "250");
    assert_eq!(report["chargeHeaderSeen"], false, "{report}");
    let c = &channels(&gw, &key).await["channels"][0];
    assert_eq!(
        (c["charged"].as_str(), c["requests"].as_u64()),
        (Some("1750"), Some(4))
    );

    // A new client process: resynced by the corrective 402; the origin fails: nothing charged.
    let report = channel_pay(&gw, &chain, 5, "?upstream_status=500", 1, None).await;
    assert_eq!(report["statuses"]["500"], 1, "{report}");
    assert_eq!(
        report["receipts"],
        json!([]),
        "no receipt for a failed answer: {report}"
    );
    let c = &channels(&gw, &key).await["channels"][0];
    assert_eq!(
        (c["charged"].as_str(), c["requests"].as_u64()),
        (Some("1750"), Some(4))
    );

    // And the channel goes on, at the full price when the origin says nothing.
    let report = channel_pay(&gw, &chain, 5, "", 1, None).await;
    assert_eq!(report["statuses"]["200"], 1, "{report}");
    assert_eq!(
        report["deposits"], 0,
        "the first deposit still covers it: {report}"
    );
    assert_eq!(report["charged"], (1750 + PRICE).to_string(), "{report}");
    let c = &channels(&gw, &key).await["channels"][0];
    assert_eq!(c["requests"], 5);
    assert_eq!(upstream.hits(), 6, "every request reached the origin once");
}

/// The `/search` route's `batch-settlement` offer, as its challenge lists it.
async fn channel_offer(gw: &Gateway) -> Value {
    let r = gw.get("/gateway/acme/search").await;
    let doc = paygate_x402::b64_json(r.headers()["payment-required"].to_str().unwrap()).unwrap();
    doc["accepts"][1].clone()
}

/// Sends a hand-made payment header to the `/search` route: the status and the JSON body.
async fn send_payment(gw: &Gateway, header: String) -> (u16, Value) {
    let r = gw
        .http
        .get(gw.url("/gateway/acme/search"))
        .header("payment-signature", header)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// The channel of account `payer` in the seller's list.
async fn channel_of(gw: &Gateway, key: &str, payer: usize) -> Value {
    channel_of_payer(gw, key, address(payer)).await
}

/// The channel of `payer` in the seller's list.
async fn channel_of_payer(gw: &Gateway, key: &str, payer: alloy_primitives::Address) -> Value {
    let list = channels(gw, key).await;
    let who = payer.to_checksum(None);
    list["channels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["payer"]
                .as_str()
                .is_some_and(|p| p.eq_ignore_ascii_case(&who))
        })
        .cloned()
        .unwrap_or_else(|| panic!("no channel of payer {payer}: {list}"))
}

/// Refunds, by the payer (the official client's cooperative `refund`) and by the seller (the
/// API): what was charged is claimed for the seller in the same transaction, the rest goes back
/// to the payer; a partial refund leaves the channel usable; repeated, nothing more moves.
#[tokio::test]
async fn the_payer_and_the_seller_refund_what_is_left() {
    let (chain, gw, _upstream, key) =
        setup_with(&[("PAYGATE__WEBHOOKS__POLL_INTERVAL_MS", "100")]).await;
    // The seller listens for its channels' claims and refunds (issue 32's webhooks).
    let hooks = Receiver::start(vec![]).await;
    let (_, secret) = register(
        &gw,
        &key,
        &hooks.url,
        json!(["channel.claimed", "payment.refunded"]),
    )
    .await;
    let receiver_before = chain.balance(address(9)).await;
    let before = [
        chain.balance(address(5)).await,
        chain.balance(address(4)).await,
    ];

    // Payer 5: two requests over a deposit of three prices, then all that is left back.
    let report = channel_pay(&gw, &chain, 5, "", 2, Some("refund")).await;
    assert_eq!(report["statuses"]["200"], 2, "{report}");
    let refund = &report["refund"];
    assert_eq!(refund["success"], true, "{report}");
    assert_eq!(refund["extra"]["refundedAmount"], PRICE.to_string());
    assert_eq!(refund["amount"], PRICE.to_string(), "{refund}");
    assert!(
        refund["transaction"].as_str().unwrap().len() == 66,
        "{report}"
    );
    assert_eq!(chain.balance(address(5)).await, before[0] - 2 * PRICE);
    assert_eq!(chain.balance(address(9)).await, receiver_before + 2 * PRICE);
    let c = channel_of(&gw, &key, 5).await;
    assert_eq!(
        (
            &c["balance"],
            &c["claimed"],
            &c["refunded"],
            &c["unclaimed"]
        ),
        (
            &json!((2 * PRICE).to_string()),
            &json!((2 * PRICE).to_string()),
            &json!(PRICE.to_string()),
            &json!("0")
        ),
        "{c}"
    );
    // Again, from a client that knows only the chain: nothing is left, nothing moves.
    let report = channel_pay(&gw, &chain, 5, "", 0, Some("refund")).await;
    assert!(
        report["refund"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("no remaining balance")),
        "{report}"
    );
    assert_eq!(chain.balance(address(5)).await, before[0] - 2 * PRICE);

    // Payer 4: one request, then half a price back; the channel keeps working.
    let half = PRICE / 2;
    let report = channel_pay(&gw, &chain, 4, "", 1, Some(&format!("refund:{half}"))).await;
    assert_eq!(report["refund"]["success"], true, "{report}");
    assert_eq!(
        chain.balance(address(4)).await,
        before[1] - 3 * PRICE + half
    );
    let report = channel_pay(&gw, &chain, 4, "", 1, None).await;
    assert_eq!(
        report["statuses"]["200"], 1,
        "resynced and served: {report}"
    );
    let c = channel_of(&gw, &key, 4).await;
    assert_eq!(c["charged"], (2 * PRICE).to_string(), "{c}");

    // The seller returns the rest: what was charged is claimed first.
    let id = c["id"].as_str().unwrap().to_string();
    let one: Value = gw
        .api(&key, Method::GET, &format!("/api/channels/{id}"), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (&one["id"], &one["payer"], &one["charged"]),
        (&c["id"], &c["payer"], &c["charged"]),
        "one channel reads as it is listed: {one}"
    );
    let path = format!("/api/channels/{id}/refund");
    let seller_refund = || {
        gw.http
            .post(gw.url(&path))
            .bearer_auth(&key)
            .header("Idempotency-Key", "refund-4")
            .send()
    };
    let r = seller_refund().await.unwrap();
    assert_eq!(r.status(), 200);
    let done: Value = r.json().await.unwrap();
    let left = 3 * PRICE - half - 2 * PRICE;
    assert_eq!(done["refundedAmount"], left.to_string(), "{done}");
    assert!(done["transaction"].is_string(), "{done}");
    assert_eq!(done["channel"]["unclaimed"], "0", "{done}");
    assert_eq!(chain.balance(address(4)).await, before[1] - 2 * PRICE);
    assert_eq!(chain.balance(address(9)).await, receiver_before + 4 * PRICE);
    // Repeated under the same key: the first answer again, nothing moves.
    let r = seller_refund().await.unwrap();
    assert_eq!(r.headers()["idempotent-replayed"], "true");
    assert_eq!(r.json::<Value>().await.unwrap(), done);
    // Repeated without it: nothing left, nothing moves.
    let again: Value = gw
        .api(&key, Method::POST, &path, Some(json!({})))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(again["refundedAmount"], "0", "{again}");
    assert_eq!(again["transaction"], Value::Null);
    assert_eq!(chain.balance(address(4)).await, before[1] - 2 * PRICE);
    // Prometheus counts what the channels did, for the organisation.
    let text = gw.prometheus(ADMIN_TOKEN).await;
    let series = |event: &str, family: &str| -> u64 {
        text.lines()
            .filter(|l| l.starts_with(family) && l.contains(&format!("event=\"{event}\"")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    let events = "paygate_channel_events_total";
    let units = "paygate_channel_base_units_total";
    assert_eq!(series("deposit", events), 2, "{text}");
    assert_eq!(series("voucher", events), 4, "{text}");
    assert_eq!(series("voucher", units), 4 * PRICE, "{text}");
    assert_eq!(series("refund", events), 3, "{text}");
    assert_eq!(series("refund", units), PRICE + half + left, "{text}");
    assert_eq!(series("claimed", units), 4 * PRICE, "{text}");
    // Each refund reached the seller's endpoint signed, with its amount and transaction, after
    // the claims of its channel (one channel's events arrive in order): what was claimed adds up.
    let refunds = hooks.accepted("payment.refunded", 3).await;
    let mut amounts: Vec<String> = refunds
        .iter()
        .map(|(_, v)| v["data"]["amount"].as_str().unwrap_or_default().to_string())
        .collect();
    amounts.sort();
    let mut want = [PRICE, half, left].map(|a| a.to_string());
    want.sort();
    assert_eq!(amounts, want, "{refunds:?}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let (claims, claimed) = loop {
        let claims = hooks.accepted("channel.claimed", 1).await;
        let claimed: u64 = claims
            .iter()
            .map(|(_, v)| {
                v["data"]["amount"]
                    .as_str()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
            })
            .sum();
        if claimed >= 4 * PRICE || std::time::Instant::now() > deadline {
            break (claims, claimed);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(claimed, 4 * PRICE, "{claims:?}");
    for (r, v) in refunds.iter().chain(&claims) {
        assert!(signed_by(&secret, r), "{r:?}");
        assert_eq!(
            v["data"]["transaction"].as_str().map(str::len),
            Some(66),
            "{v}"
        );
        assert!(v["data"]["channelId"].is_string(), "{v}");
    }
    assert!(
        refunds
            .iter()
            .any(|(_, v)| v["data"]["channelId"] == json!(id)),
        "the seller's refund of {id}: {refunds:?}"
    );
    // A channel the seller does not have.
    for bad in ["0x".to_string() + &"ab".repeat(32), "nope".into()] {
        let r = gw
            .api(
                &key,
                Method::POST,
                &format!("/api/channels/{bad}/refund"),
                None,
            )
            .await;
        assert_eq!(r.status(), 404, "{bad}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["code"], "NOT_FOUND", "{body}");
        let r = gw
            .api(&key, Method::GET, &format!("/api/channels/{bad}"), None)
            .await;
        assert_eq!(r.status(), 404, "{bad}");
    }
    // Another organisation does not see the channel.
    let (_, other) = gw.create_org("other", None).await;
    let r = gw
        .api(&other, Method::GET, &format!("/api/channels/{id}"), None)
        .await;
    assert_eq!(r.status(), 404);
}

/// The payer's escape hatch: once it asks for its deposit back on chain, the claimer (reading
/// the contract's events) claims what was served before the delay ends and vouchers stop; the
/// withdrawal returns only the rest, and the channel shows it.
#[tokio::test]
async fn a_withdrawal_is_watched_and_what_was_served_is_claimed_first() {
    let (chain, gw, _upstream, key) = setup_with(&[
        ("PAYGATE__CHANNELS__WITHDRAW_DELAY_SECONDS", "900"),
        ("PAYGATE__CHANNELS__CLAIM_LEAD_SECONDS", "899"),
        ("PAYGATE__CHANNELS__CLAIM_INTERVAL_SECONDS", "1"),
    ])
    .await;
    let (payer_before, receiver_before) = (
        chain.balance(address(3)).await,
        chain.balance(address(9)).await,
    );
    let report = channel_pay(&gw, &chain, 3, "", 2, None).await;
    assert_eq!(report["statuses"]["200"], 2, "{report}");
    let c = channel_of(&gw, &key, 3).await;
    assert_eq!(c["status"], "open");
    let config: paygate_x402::batch::ChannelConfigWire =
        serde_json::from_value(c["config"].clone()).unwrap();
    let config = config.parse().unwrap();
    let initiate = IBatchSettlement::initiateWithdrawCall {
        config: config.clone(),
        amount: u128::from(3 * PRICE),
    };
    chain
        .send(3, SETTLEMENT_ADDRESS, initiate.abi_encode())
        .await
        .expect("initiateWithdraw");

    // Below every threshold, yet claimed: the payer is withdrawing.
    let c = eventually(|| async {
        let c = channel_of(&gw, &key, 3).await;
        (c["status"] == "withdrawing" && c["claimed"] == json!((2 * PRICE).to_string()))
            .then_some(c)
    })
    .await;
    assert_eq!(c["unclaimed"], "0", "{c}");
    assert_eq!(chain.balance(address(9)).await, receiver_before + 2 * PRICE);
    // No more vouchers while the withdrawal can finish before a claim would land: with a lead
    // one second short of the delay, once the wall clock is past the chain's second of
    // initiateWithdraw (anvil's block times may run ahead of the wall clock).
    let initiated = {
        use alloy_provider::Provider;
        let block = chain
            .provider(0)
            .get_block_by_number(alloy_rpc_types_eth::BlockNumberOrTag::Latest)
            .await
            .unwrap()
            .unwrap();
        block.header.timestamp
    };
    while common::chain::now() <= initiated + 1 {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let report = channel_pay(&gw, &chain, 3, "", 1, None).await;
    assert_eq!(report["statuses"]["402"], 1, "{report}");

    // The payer finishes it: only what was not served comes back.
    chain.advance(901).await;
    let finalize = IBatchSettlement::finalizeWithdrawCall { config };
    chain
        .send(3, SETTLEMENT_ADDRESS, finalize.abi_encode())
        .await
        .expect("finalizeWithdraw");
    assert_eq!(chain.balance(address(3)).await, payer_before - 2 * PRICE);
    let c = eventually(|| async {
        let c = channel_of(&gw, &key, 3).await;
        (c["status"] == "open").then_some(c)
    })
    .await;
    assert_eq!(c["balance"], (2 * PRICE).to_string(), "{c}");
}

/// Polls `f` every 200 ms until it gives a value (at most 30 s).
async fn eventually<T, F, Fut>(f: F) -> T
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    for _ in 0..150 {
        if let Some(v) = f().await {
            return v;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    panic!("not reached within 30 s");
}

alloy_sol_types::sol! {
    function transfer(address to, uint256 amount) external returns (bool);
}
