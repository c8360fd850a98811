//! `auth-capture` payments as the official npm client signs them (@x402/evm's
//! `AuthCaptureEvmScheme`), for tests that send the header themselves.

use super::chain::KEYS;
use super::node_json;
use serde_json::{json, Value};

/// The payment document (before base64) the client sends for the first requirement of
/// `challenge`, signed by account `payer`.
pub fn signed_doc(challenge: &Value, payer: usize) -> Value {
    let accepted = challenge["accepts"][0].clone();
    let signed = node_json(
        "x402_permit2_sign.cjs",
        &json!({"scheme": "auth-capture", "key": KEYS[payer], "requirements": accepted}),
    );
    json!({"x402Version": 2, "resource": challenge["resource"],
        "accepted": accepted, "payload": signed["payload"]})
}

/// The seller's wallet (account `seller`, a route's receiver) approves paygate's receiver refund
/// collector once: its refunds are funded from it.
pub async fn approve_refunds(chain: &super::chain::Chain, seller: usize) {
    let collector = paygate_x402::auth_capture::RECEIVER_REFUND_COLLECTOR_ADDRESS;
    approve_collector(chain, seller, collector).await;
}

/// [`approve_refunds`] for the collector at `collector`.
pub async fn approve_collector(
    chain: &super::chain::Chain,
    seller: usize,
    collector: alloy_primitives::Address,
) {
    use alloy_sol_types::SolCall;
    let data = paygate_x402::permit2::IErc20Permit2::approveCall {
        spender: collector,
        amount: alloy_primitives::U256::MAX,
    }
    .abi_encode();
    chain
        .send(seller, super::chain::USDC.parse().unwrap(), data)
        .await
        .expect("approve the refund collector");
}

/// An `auth-capture` route at `path` of the organisation whose API key is `key`, priced 0.01
/// USD, forwarding to `upstream`'s echo, refundable for `window` seconds.
pub async fn refundable_route(
    gw: &super::Gateway,
    key: &str,
    path: &str,
    window: u64,
    upstream: &super::upstream::Upstream,
) -> Value {
    gw.create_route(
        key,
        json!({"path": path, "priceUSD": 0.01, "schemes": ["auth-capture"],
            "refundWindowSeconds": window,
            "targetUrl": format!("{}/echo", upstream.url), "network": "base-sepolia"}),
    )
    .await
}

/// The payments of the organisation whose API key is `key` (newest first), once no escrow
/// capture sent after its answer is still to be recorded: a paid `auth-capture` answer goes
/// out when its capture is sent, and its record says `SETTLED` once the capture's block is read.
pub async fn ledger_confirmed(gw: &super::Gateway, key: &str) -> Vec<Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let list: Value = gw
            .api(key, reqwest::Method::GET, "/api/payments?limit=500", None)
            .await
            .json()
            .await
            .unwrap();
        let payments = list["payments"].as_array().cloned().unwrap_or_default();
        let capturing = payments
            .iter()
            .any(|p| !p["escrow"]["capturingTransaction"].is_null());
        if !capturing || std::time::Instant::now() > deadline {
            return payments;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
