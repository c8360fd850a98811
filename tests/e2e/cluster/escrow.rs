//! Issue 52: `auth-capture` and `upto` on a cluster. The nodes share one operator (paygate's
//! `PaygateOperator` contract, forwarding escrow and upto-proxy calls from any of their
//! relayers), so a `402` rendered by one node is paid at another, captured (or settled) there,
//! and refunded through a third. Before, each node's own relayer was the operator and the `upto`
//! facilitator: another node refused the payment and could neither void nor refund its holds.

use super::*;
use alloy_primitives::{Address, U256};
use paygate_x402::auth_capture::DEV_OPERATOR_ADDRESS;

async fn usdc_of(chain: &Chain, who: Address) -> U256 {
    let usdc: Address = common::chain::USDC.parse().unwrap();
    paygate_x402::facilitator::embedded::balance_of(&chain.rpc, usdc, who)
        .await
        .expect("balanceOf")
}

/// Three nodes on one PostgreSQL sharing the dev chain's operator contract, and an origin.
async fn operator_cluster() -> (
    paygate_store::testing::PgCluster,
    std::sync::Arc<Chain>,
    Vec<Gateway>,
    Upstream,
) {
    let pg = paygate_store::testing::PgCluster::start();
    let chain = std::sync::Arc::new(Chain::start());
    let operator = DEV_OPERATOR_ADDRESS.to_checksum(None);
    let n = paid_nodes(
        &chain,
        &pg.url(),
        &[("PAYGATE__FACILITATOR__OPERATOR", operator.as_str())],
    )
    .await;
    (pg, chain, n, Upstream::start().await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escrowed_payment_is_offered_by_one_node_paid_at_another_refunded_at_a_third() {
    let (_pg, chain, n, upstream) = operator_cluster().await;
    let (key, receiver) = acme_route(
        &n,
        json!({"path": "held", "priceUSD": 0.01, "schemes": ["auth-capture"],
            "refundWindowSeconds": 3600,
            "targetUrl": format!("{}/echo", upstream.url), "network": "base-sepolia"}),
    )
    .await;
    let path = "/gateway/acme/held";
    let operator = DEV_OPERATOR_ADDRESS.to_checksum(None);
    // Every node offers the same operator: the deployment's, not its own relayer.
    for node in &n {
        let c = common::windows::challenge_at(node, path).await;
        assert_eq!(
            c["accepts"][0]["extra"]["captureAuthorizer"], operator,
            "{c}"
        );
    }
    let payer = address(4);
    let before = usdc_of(&chain, payer).await;
    let challenge = common::windows::challenge_at(&n[0], path).await;
    let header = b64_header(&common::escrow::signed_doc(&challenge, 4));
    let (status, said) = send_paid(&n[1], path, &header).await;
    assert_eq!((status, said), (200, None), "{}", n[1].log());
    assert_eq!(usdc_of(&chain, payer).await, before - U256::from(10_000u64));
    assert_eq!(usdc_of(&chain, receiver).await, U256::from(10_000u64));
    assert_eq!(
        usdc_of(&chain, paygate_x402::auth_capture::ESCROW_ADDRESS).await,
        U256::ZERO,
        "captured, nothing left held"
    );
    // The seller refunds part of it through a third node.
    common::escrow::approve_refunds(&chain, 9).await;
    let list: Value = n[2]
        .api(&key, Method::GET, "/api/payments?limit=1", None)
        .await
        .json()
        .await
        .unwrap();
    let id = list["payments"][0]["id"].as_str().unwrap().to_string();
    let r = n[2]
        .http
        .post(n[2].url(&format!("/api/payments/{id}/refund")))
        .bearer_auth(&key)
        .header("Idempotency-Key", "cluster-refund")
        .json(&json!({"amountUSDC": "0.004"}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let body: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        usdc_of(&chain, payer).await,
        before - U256::from(6_000u64),
        "the payer got 0.004 back"
    );
    assert_eq!(usdc_of(&chain, receiver).await, U256::from(6_000u64));
    // An origin that fails, paid at the third node against the second's 402: voided there.
    let challenge = common::windows::challenge_at(&n[1], path).await;
    let header = b64_header(&common::escrow::signed_doc(&challenge, 4));
    let failing = format!("{path}?upstream_status=500");
    let (status, _) = send_paid(&n[2], &failing, &header).await;
    assert_eq!(status, 500);
    assert_eq!(usdc_of(&chain, payer).await, before - U256::from(6_000u64));
}

/// The operator contract on its own: only the deployment's relayers may send escrow calls
/// through it, it is initialised once, and its owner alone changes the relayers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_contract_forwards_for_its_relayers_only() {
    use alloy_sol_types::SolCall;
    use paygate_x402::operator::IPaygateOperator;
    let chain = Chain::start();
    let op = DEV_OPERATOR_ADDRESS;
    let void = paygate_x402::auth_capture::void_call(&paygate_x402::auth_capture::PaymentInfo {
        operator: op,
        payer: address(4),
        receiver: address(9),
        token: common::chain::USDC.parse().unwrap(),
        maxAmount: alloy_primitives::Uint::from(1u64),
        preApprovalExpiry: alloy_primitives::Uint::from(1u64),
        authorizationExpiry: alloy_primitives::Uint::from(2u64),
        refundExpiry: alloy_primitives::Uint::from(2u64),
        minFeeBps: 0,
        maxFeeBps: 0,
        feeReceiver: op,
        salt: U256::from(1u64),
    });
    let through = IPaygateOperator::escrowCall { data: void.into() }.abi_encode();
    // The operator's own refusal, as a node reports it: `NotRelayer(address)`'s selector.
    let not_relayer =
        alloy_primitives::hex::encode(&alloy_primitives::keccak256("NotRelayer(address)")[..4]);
    // A relayer's call reaches the escrow (which refuses to void a payment never held).
    let relayed = chain.send(5, op, through.clone()).await.unwrap_err();
    assert!(!relayed.contains(&not_relayer), "{relayed}");
    // Anyone else is refused by the operator itself.
    let other = alloy_signer_local::PrivateKeySigner::random();
    let stranger = alloy_provider::ProviderBuilder::new()
        .wallet(other.clone())
        .connect_http(chain.rpc.parse().unwrap());
    use alloy_network::TransactionBuilder;
    use alloy_provider::Provider;
    let tx = alloy_rpc_types_eth::TransactionRequest::default()
        .with_from(other.address())
        .with_to(op)
        .with_input(through.clone());
    let refused = stranger.call(tx).await.unwrap_err().to_string();
    assert!(refused.contains(&not_relayer), "{refused}");
    let asked = IPaygateOperator::relayersCall {
        relayer: other.address(),
    }
    .abi_encode();
    let tx = alloy_rpc_types_eth::TransactionRequest::default()
        .with_to(op)
        .with_input(asked);
    let out = stranger.call(tx).await.unwrap();
    assert!(!IPaygateOperator::relayersCall::abi_decode_returns(&out).unwrap());
    // Initialised once; only the owner (the deployer, account 0) sets relayers.
    let again = IPaygateOperator::initializeCall {
        owner: address(5),
        relayers: vec![address(5)],
    }
    .abi_encode();
    assert!(chain.send(5, op, again).await.is_err());
    let set = IPaygateOperator::setRelayerCall {
        relayer: address(5),
        allowed: false,
    }
    .abi_encode();
    assert!(chain.send(5, op, set.clone()).await.is_err());
    chain
        .send(0, op, set)
        .await
        .expect("the owner sets relayers");
    // Removed, account 5's forwarded call is the operator's refusal now, not the escrow's.
    let refused = chain.send(5, op, through).await.unwrap_err();
    assert!(refused.contains(&not_relayer), "{refused}");
}

/// An `upto` authorization signed against one node's `402` (naming the deployment's operator as
/// its facilitator) is settled by another node through the operator contract.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upto_payment_offered_by_one_node_is_settled_by_another() {
    use alloy_sol_types::SolCall;
    let (_pg, chain, n, upstream) = operator_cluster().await;
    let (_, receiver) = acme_route(
        &n,
        json!({"path": "llm", "priceUSD": 0.01, "schemes": ["upto"], "pricing": "usage",
            "targetUrl": format!("{}/echo", upstream.url), "network": "base-sepolia"}),
    )
    .await;
    let approve = paygate_x402::permit2::IErc20Permit2::approveCall {
        spender: paygate_x402::permit2::PERMIT2_ADDRESS,
        amount: U256::MAX,
    }
    .abi_encode();
    chain
        .send(5, common::chain::USDC.parse().unwrap(), approve)
        .await
        .expect("approve Permit2");
    let path = "/gateway/acme/llm";
    let challenge = common::windows::challenge_at(&n[0], path).await;
    let accepted = challenge["accepts"][0].clone();
    assert_eq!(accepted["scheme"], "upto", "{challenge}");
    let signed = node_json(
        "x402_permit2_sign.cjs",
        &json!({"scheme": "upto", "key": KEYS[5], "requirements": accepted}),
    );
    let doc = json!({"x402Version": 2, "resource": challenge["resource"],
        "accepted": accepted, "payload": signed["payload"]});
    let payer = address(5);
    let before = usdc_of(&chain, payer).await;
    let (status, said) = send_paid(&n[2], path, &b64_header(&doc)).await;
    assert_eq!((status, said), (200, None), "{}", n[2].log());
    assert_eq!(usdc_of(&chain, payer).await, before - U256::from(10_000u64));
    assert_eq!(usdc_of(&chain, receiver).await, U256::from(10_000u64));
}

/// Issue 52: a node killed between an escrow's hold and its capture. Another node's
/// reconciliation voids the hold once its live-hold lease ran out (`[facilitator]
/// live_hold_seconds`, short here): the payer has its money back, the ledger says so, and the
/// audit finds the ledger and the chain agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_left_by_a_killed_node_is_voided_by_another() {
    let pg = paygate_store::testing::PgCluster::start();
    let chain = std::sync::Arc::new(Chain::start());
    let operator = DEV_OPERATOR_ADDRESS.to_checksum(None);
    let mut n = paid_nodes(
        &chain,
        &pg.url(),
        &[
            ("PAYGATE__FACILITATOR__OPERATOR", operator.as_str()),
            ("PAYGATE__FACILITATOR__LIVE_HOLD_SECONDS", "4"),
            ("PAYGATE__FACILITATOR__SETTLE_TIMEOUT_SECONDS", "3"),
            ("PAYGATE__FACILITATOR__REQUEST_TIMEOUT_SECONDS", "2"),
            ("PAYGATE__FACILITATOR__RECONCILE_INTERVAL_SECONDS", "1"),
        ],
    )
    .await;
    let (reached, origin) = common::upstream::hanging_origin().await;
    let (key, receiver) = acme_route(
        &n,
        json!({"path": "slow", "priceUSD": 0.01, "schemes": ["auth-capture"],
            "targetUrl": format!("{origin}/slow"), "network": "base-sepolia"}),
    )
    .await;
    let path = "/gateway/acme/slow";
    let payer = address(4);
    let before = usdc_of(&chain, payer).await;
    // Rendered by node 1, held by node 0, which is killed while the origin works on it.
    let challenge = common::windows::challenge_at(&n[1], path).await;
    let header = b64_header(&common::escrow::signed_doc(&challenge, 4));
    let (http, url) = (n[0].http.clone(), n[0].url(path));
    let asked = tokio::spawn(async move {
        let r = http.get(url).header("PAYMENT-SIGNATURE", header).send();
        r.await
            .map(|r| r.status().as_u16())
            .map_err(|e| e.to_string())
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while reached.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(!asked.is_finished(), "answered before forwarding");
        assert!(
            Instant::now() < deadline,
            "never forwarded:\n{}",
            n[0].log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    n[0].kill();
    let _cut = asked.await.unwrap();
    let escrow = paygate_x402::auth_capture::ESCROW_ADDRESS;
    assert_eq!(usdc_of(&chain, escrow).await, U256::from(10_000u64), "held");

    // Another node voids it once the hold's lease ran out.
    let deadline = Instant::now() + Duration::from_secs(60);
    while usdc_of(&chain, payer).await != before {
        assert!(
            Instant::now() < deadline,
            "the hold was never voided:\n{}\n{}",
            n[1].log(),
            n[2].log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(usdc_of(&chain, escrow).await, U256::ZERO);
    assert_eq!(
        usdc_of(&chain, receiver).await,
        U256::ZERO,
        "nothing captured"
    );
    let payment = n[2].latest_payment_when(&key, "FAILED", 30).await;
    assert!(
        payment["escrow"]["voidedTransaction"].is_string(),
        "{payment}"
    );
    let (ok, out, err) = cli(&n[2], Some(&key), &["audit", "--json"]).await;
    assert!(ok, "{out}\n{err}");
    let audit: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(audit["differences"], json!([]), "{audit}");
}
