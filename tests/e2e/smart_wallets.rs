//! Smart-wallet payers end to end (issue 44, item 5): the real binary on anvil paid by the
//! official npm client (@x402/fetch with @x402/evm's `exact`, `upto` and `auth-capture`) as a
//! smart wallet whose owner's key signs (`Eip1271Wallet`): deployed (its EIP-1271
//! `isValidSignature` asked before anything is reserved), or counterfactual (ERC-6492 signatures,
//! viem's serializer: the wallet asked through a simulated deployment, then deployed by the
//! relayer before the first settlement). A wallet that says no, or a factory the operator did
//! not list, moves nothing and reaches no origin. Channels with such wallets are in
//! `channels::other_payers`.

use crate::common;

use alloy_primitives::{Address, U256};
use alloy_sol_types::SolCall;
use common::chain::{address, Chain, Counterfactual, KEYS, USDC};
use common::upstream::Upstream;
use common::*;
use serde_json::{json, Value};

alloy_sol_types::sol! {
    function execute(address to, bytes data) external returns (bytes);
    function approve(address spender, uint256 amount) external returns (bool);
}

struct Setup {
    chain: Chain,
    gw: Gateway,
    upstream: Upstream,
    key: String,
    receiver: Address,
}

async fn setup() -> Setup {
    let chain = Chain::start();
    let gw = Gateway::start_with_owned(chain.gateway_env()).await;
    let upstream = Upstream::start().await;
    let receiver = address(9);
    let (_, key) = gw
        .create_org("acme", Some(&receiver.to_checksum(None)))
        .await;
    for (path, extra) in [
        ("report", json!({})),
        ("llm", json!({"schemes": ["upto"], "pricing": "usage"})),
        ("held", json!({"schemes": ["auth-capture"]})),
    ] {
        let mut body = json!({"path": path, "priceUSD": 0.01,
            "targetUrl": format!("{}/echo", upstream.url), "network": "base-sepolia"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let route = gw.create_route(&key, body).await;
        assert_eq!(route["path"], format!("/{path}"), "{route}");
    }
    Setup {
        chain,
        gw,
        upstream,
        key,
        receiver,
    }
}

fn usdc() -> Address {
    USDC.parse().unwrap()
}

/// The official client pays `path` once as `wallet`, its signatures made by account `signer`'s
/// key (wrapped for `factory` when the wallet is counterfactual).
fn pay_as(
    s: &Setup,
    path: &str,
    wallet: Address,
    signer: usize,
    factory: Option<&Counterfactual>,
) -> Value {
    let mut input = json!({"url": s.gw.url(path), "key": KEYS[signer], "rpc": s.chain.rpc,
        "calls": 1, "wallet": wallet.to_checksum(None)});
    if let Some(c) = factory {
        input["factory"] = c.script_input();
    }
    node_json("x402_permit2_pay.cjs", &input)["results"][0].clone()
}

fn refused_with(r: &Value, reason: &str) {
    assert_eq!(r["status"], 402, "{r}");
    assert_eq!(r["error"], reason, "{r}");
}

/// The ledger's newest payment.
async fn newest_payment(s: &Setup) -> Value {
    let list: Value =
        s.gw.api(&s.key, reqwest::Method::GET, "/api/payments", None)
            .await
            .json()
            .await
            .unwrap();
    list["payments"][0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployed_smart_wallet_pays_exact_upto_and_auth_capture() {
    let s = setup().await;
    let wallet: Address = "0x0000000000000000000000000000000000001271"
        .parse()
        .unwrap();
    s.chain.place_eip1271_wallet(wallet, address(6)).await;
    s.chain.send_usdc(6, wallet, 100_000).await;
    // Its owner lets Permit2 move its USDC (for `upto`), a call the wallet makes itself.
    let allow = approveCall {
        spender: paygate_x402::permit2::PERMIT2_ADDRESS,
        amount: U256::MAX,
    };
    let call = executeCall {
        to: usdc(),
        data: allow.abi_encode().into(),
    };
    s.chain.send(6, wallet, call.abi_encode()).await.unwrap();

    // Signed by another key than its owner's: the wallet says no, whatever the scheme.
    refused_with(
        &pay_as(&s, "/gateway/acme/report", wallet, 5, None),
        "invalid_exact_evm_payload_signature",
    );
    refused_with(
        &pay_as(
            &s,
            "/gateway/acme/llm?upstream_charge=0.004",
            wallet,
            5,
            None,
        ),
        "invalid_permit2_signature",
    );
    assert_eq!(s.upstream.hits(), 0);
    assert_eq!(s.chain.balance(wallet).await, 100_000);

    // Its owner's signatures: `exact` takes the price, `upto` the stated charge, `auth-capture`
    // captures the price; each from the wallet.
    let r = pay_as(&s, "/gateway/acme/report", wallet, 6, None);
    assert_eq!(r["status"], 200, "{r}\n{}", s.gw.log());
    assert_eq!(s.chain.balance(wallet).await, 90_000);
    let r = pay_as(
        &s,
        "/gateway/acme/llm?upstream_charge=0.004",
        wallet,
        6,
        None,
    );
    assert_eq!(r["status"], 200, "{r}");
    assert_eq!(r["receipt"]["amount"], "4000", "{r}");
    assert_eq!(s.chain.balance(wallet).await, 86_000);
    let r = pay_as(&s, "/gateway/acme/held", wallet, 6, None);
    assert_eq!(r["status"], 200, "{r}");
    assert_eq!(s.chain.balance(wallet).await, 76_000);
    assert_eq!(s.chain.balance(s.receiver).await, 24_000);
    let newest = newest_payment(&s).await;
    assert!(
        newest["payer"]
            .as_str()
            .unwrap()
            .eq_ignore_ascii_case(&wallet.to_string()),
        "{newest}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counterfactual_wallet_is_deployed_by_its_first_payment() {
    let s = setup().await;
    let c = s.chain.counterfactual_wallet(address(6), 1).await;
    // Funded before it exists (an address is all a token needs).
    s.chain.send_usdc(6, c.address, 50_000).await;
    assert!(!s.chain.has_code(c.address).await);

    // A factory the operator did not list: nothing is simulated against it, nothing deployed.
    let unlisted = Counterfactual {
        factory: address(7),
        ..c.clone()
    };
    refused_with(
        &pay_as(&s, "/gateway/acme/report", c.address, 6, Some(&unlisted)),
        "invalid_exact_evm_payload_signature",
    );
    // The listed factory, but signed by another key: the wallet it would deploy says no.
    refused_with(
        &pay_as(&s, "/gateway/acme/report", c.address, 5, Some(&c)),
        "invalid_exact_evm_payload_signature",
    );
    assert!(!s.chain.has_code(c.address).await, "nothing deployed");
    assert_eq!(s.upstream.hits(), 0);
    assert_eq!(s.chain.balance(c.address).await, 50_000);
    // Issue 52: a wallet whose balance does not cover the price is not deployed at the
    // relayer's cost (its owner's signature is good; a fresh salt a request would cost a
    // deployment each).
    let empty = s.chain.counterfactual_wallet(address(6), 9).await;
    refused_with(
        &pay_as(&s, "/gateway/acme/report", empty.address, 6, Some(&empty)),
        "insufficient_funds",
    );
    assert!(!s.chain.has_code(empty.address).await, "not deployed");

    // Its owner's signature: the relayer deploys the wallet, then the transfer settles.
    let r = pay_as(&s, "/gateway/acme/report", c.address, 6, Some(&c));
    assert_eq!(r["status"], 200, "{r}\n{}", s.gw.log());
    assert!(
        s.chain.has_code(c.address).await,
        "deployed by its first payment"
    );
    assert_eq!(s.chain.balance(c.address).await, 40_000);
    // A client still wrapping its signatures once deployed pays on: the inner one is used.
    let r = pay_as(&s, "/gateway/acme/report", c.address, 6, Some(&c));
    assert_eq!(r["status"], 200, "{r}");
    assert_eq!(s.chain.balance(c.address).await, 30_000);
    assert_eq!(s.chain.balance(s.receiver).await, 20_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counterfactual_wallet_pays_into_escrow() {
    let s = setup().await;
    let c = s.chain.counterfactual_wallet(address(6), 2).await;
    s.chain.send_usdc(6, c.address, 50_000).await;
    refused_with(
        &pay_as(&s, "/gateway/acme/held", c.address, 5, Some(&c)),
        "invalid_exact_evm_payload_signature",
    );
    assert!(!s.chain.has_code(c.address).await);
    let empty = s.chain.counterfactual_wallet(address(6), 8).await;
    refused_with(
        &pay_as(&s, "/gateway/acme/held", empty.address, 6, Some(&empty)),
        "insufficient_funds",
    );
    assert!(!s.chain.has_code(empty.address).await, "not deployed");
    // Deployed, held, served, captured.
    let r = pay_as(&s, "/gateway/acme/held", c.address, 6, Some(&c));
    assert_eq!(r["status"], 200, "{r}\n{}", s.gw.log());
    assert!(s.chain.has_code(c.address).await);
    assert_eq!(s.chain.balance(c.address).await, 40_000);
    assert_eq!(s.chain.balance(s.receiver).await, 10_000);
    // An origin that fails: the wallet's hold is voided, it pays nothing.
    let r = pay_as(
        &s,
        "/gateway/acme/held?upstream_status=500",
        c.address,
        6,
        Some(&c),
    );
    assert_eq!(r["status"], 500, "{r}");
    assert_eq!(s.chain.balance(c.address).await, 40_000);
}

/// A counterfactual wallet paying `upto` with no approval: its Permit2 authorization and its
/// USDC permit to Permit2 both come ERC-6492-wrapped; the relayer deploys the wallet, then
/// submits the permit (checked by USDC through the wallet, EIP-1271) and the charge in one
/// `settleWithPermit`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counterfactual_wallet_pays_upto_with_its_permit() {
    let s = setup().await;
    let c = s.chain.counterfactual_wallet(address(6), 4).await;
    s.chain.send_usdc(6, c.address, 50_000).await;
    refused_with(
        &pay_as(
            &s,
            "/gateway/acme/llm?upstream_charge=0.004",
            c.address,
            5,
            Some(&c),
        ),
        "invalid_permit2_signature",
    );
    assert!(!s.chain.has_code(c.address).await);
    let r = pay_as(
        &s,
        "/gateway/acme/llm?upstream_charge=0.004",
        c.address,
        6,
        Some(&c),
    );
    assert_eq!(r["status"], 200, "{r}\n{}", s.gw.log());
    assert_eq!(r["receipt"]["amount"], "4000", "{r}");
    assert!(
        s.chain.has_code(c.address).await,
        "deployed by its first charge"
    );
    assert_eq!(s.chain.balance(c.address).await, 46_000);
    assert_eq!(s.chain.balance(s.receiver).await, 4_000);
}
