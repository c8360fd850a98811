//! Cluster, continued: a payout key, a channel and the official client's payments spread over the nodes.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_corridor_pay_key_sent_to_every_node_at_once_pays_once() {
    let pg = paygate_store::testing::PgCluster::start();
    // One payout provider for the cluster: node 0's sandbox; the others reach it over HTTP,
    // and its webhooks come back through node 0 into the shared database.
    let secret = ("PAYGATE_WEBHOOK_SECRETS", "cluster-webhook-secret");
    let mut n = vec![Gateway::start_on(&pg.url(), &[secret]).await];
    let provider = format!(
        "http://{}",
        n[0].sandbox.clone().expect("the sandbox provider")
    );
    for _ in 1..3 {
        let env = [
            secret,
            ("PAYGATE__PAYOUT__PROVIDER", "http"),
            ("PAYGATE__PAYOUT__PROVIDER_URL", provider.as_str()),
        ];
        n.push(Gateway::start_on(&pg.url(), &env).await);
    }
    let (_, key) = n[0].create_org("acme", Some(WALLET_A)).await;
    let corridor = n[1].active_corridor(&key, "BRL").await;
    let quote: Value = n[2]
        .api(
            &key,
            Method::GET,
            &format!("/corridors/{corridor}/quote?amount=50"),
            None,
        )
        .await
        .json()
        .await
        .unwrap();
    let body = json!({
        "quoteId": quote["quoteId"], "fromAddress": WALLET_A, "amountUSDC": quote["amount"],
        "beneficiary": {"name": "Ana Souza", "bankName": "Banco Teste",
                        "accountNumber": "0001-23456-7", "country": "BR", "currency": "BRL"}});
    let sends = (0..12).map(|i| n[i % 3].pay_corridor(&key, &corridor, "one-pay", &body));
    let mut ids = std::collections::HashSet::new();
    for r in futures_util::future::join_all(sends).await {
        let status = r.status().as_u16();
        let v: Value = r.json().await.unwrap();
        match status {
            202 => {
                ids.insert(v["paymentId"].as_str().unwrap().to_string());
            }
            // The key in flight on another request, as on one node.
            409 => assert_eq!(v["code"], "DUPLICATE_REQUEST", "{v}"),
            other => panic!("unexpected {other}: {v}"),
        }
    }
    // The request that started the payout answers it; the others replay it or find it in flight.
    assert_eq!(ids.len(), 1, "{ids:?}");
    let payouts = n[0].provider_payouts().await;
    assert_eq!(payouts.len(), 1, "one payout at the provider: {payouts:?}");
    // A replay on any node: the stored answer, the one payment.
    for node in &n {
        let r = node.pay_corridor(&key, &corridor, "one-pay", &body).await;
        assert_eq!(r.status(), 202);
        assert_eq!(r.headers()["idempotent-replayed"], "true");
        let v: Value = r.json().await.unwrap();
        let id = v["paymentId"].as_str().unwrap();
        assert!(ids.contains(id), "{id} {ids:?}");
    }
}

/// A payment channel whose requests arrive on every node (issue 29): each voucher step is
/// charged once whichever node serves it (a node takes the channel over once the last one's
/// lease ran out), the same step sent to all three nodes at once is served once, and the claim
/// pays the receiver exactly what was charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_paid_on_every_node_charges_each_step_once() {
    use common::channel::HandPayer;
    const PRICE: u128 = 1_000;
    let cc = channel_cluster(json!(["exact", "batch-settlement"]), &[]).await;
    let (chain, n, upstream, key, receiver) =
        (&cc.chain, &cc.n, &cc.upstream, &cc.key, cc.receiver);
    let r = n[0].get("/gateway/acme/search").await;
    let doc = b64_json(r.headers()["payment-required"].to_str().unwrap());
    let payer = HandPayer::new(1, &doc["accepts"][1], 3);
    let send = |node: &Gateway, payload: Value| {
        node.http
            .get(node.url("/gateway/acme/search"))
            .header("payment-signature", payer.header(payload))
            .send()
    };
    let receiver_before = chain.balance(receiver).await;

    // Opened on node 0, then one step on each node in turn.
    let d = common::channel::deposit(&payer.config, 1, 20 * PRICE as u64, 1);
    let r = send(&n[0], payer.deposit(&d, PRICE)).await.unwrap();
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    for step in 2..=10u128 {
        let r = send(&n[step as usize % 3], payer.voucher(step * PRICE))
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "step {step}: {:?}", r.text().await);
    }
    // The next step sent to all three nodes at once: served once.
    let sends = n.iter().map(|node| send(node, payer.voucher(11 * PRICE)));
    let answers = futures_util::future::join_all(sends).await;
    let statuses: Vec<u16> = answers
        .into_iter()
        .map(|r| r.unwrap().status().as_u16())
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        1,
        "{statuses:?}"
    );
    assert!(
        statuses.iter().all(|s| matches!(s, 200 | 402)),
        "{statuses:?}"
    );
    assert_eq!(
        upstream.hits(),
        11,
        "every charged step reached the origin once"
    );

    let c = cc.channel(2).await;
    assert_eq!(c["charged"], (11 * PRICE).to_string(), "{c}");
    assert_eq!(c["requests"], 11, "{c}");
    n[1].claim_channels(key).await;
    assert_eq!(
        chain.balance(receiver).await,
        receiver_before + 11 * PRICE as u64
    );
}

/// The official npm client (`@x402/fetch` with `@x402/evm`'s batch-settlement scheme) pays 1,000
/// requests over one deposit with its requests spread over the three nodes (50 to a node in
/// turn, as a balancer with short stickiness spreads them): every request served once, the
/// channel charged exactly 1,000 prices, one claim moves exactly that to the receiver, and the
/// payer's deposit keeps nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_client_pays_over_one_deposit_across_the_nodes() {
    const N: usize = 1_000;
    const PRICE: u64 = 1_000;
    // The seller's claim below is the one that claims.
    let cc = channel_cluster(
        json!(["batch-settlement"]),
        &[("PAYGATE__CHANNELS__CLAIM_MIN_BASE_UNITS", "1000000000")],
    )
    .await;
    let (chain, n, upstream, key, receiver) =
        (&cc.chain, &cc.n, &cc.upstream, &cc.key, cc.receiver);
    let (payer_before, receiver_before) = (
        chain.balance(address(2)).await,
        chain.balance(receiver).await,
    );
    let urls: Vec<String> = n.iter().map(|g| g.url("/gateway/acme/search")).collect();
    let report = common::channel::official_pay(&urls.join(","), 2, &chain.rpc, N, 50, None).await;
    assert_eq!(report["statuses"]["200"], N, "{report}");
    assert_eq!(report["deposits"], 1, "one deposit: {report}");
    let total = PRICE * N as u64;
    assert_eq!(report["charged"], total.to_string(), "{report}");
    assert_eq!(upstream.hits(), N, "every request reached the origin once");
    assert_eq!(chain.balance(address(2)).await, payer_before - total);

    let c = cc.channel(2).await;
    assert_eq!(c["charged"], total.to_string(), "{c}");
    assert_eq!(c["requests"], N, "{c}");
    let claimed = n[1].claim_channels(key).await;
    assert_eq!(claimed["claimedChannels"], 1, "{claimed}");
    assert_eq!(chain.balance(receiver).await, receiver_before + total);
}

/// MPP on a cluster (issue 53): a challenge one node issued is paid at another (every node
/// binds challenges with the deployment's secret), once: the same credential at the third node
/// is refused as used, and nothing more moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mpp_challenge_from_one_node_is_paid_once_at_another() {
    use crate::mpp::{challenge_at, credential_for, pay_at};
    // The nodes behind one public address, as a cluster is deployed: its host is the realm.
    let public = (
        "PAYGATE__SERVER__PUBLIC_BASE_URL",
        "https://api.paygate.test",
    );
    let cc = channel_cluster(json!(["exact"]), &[public]).await;
    let (chain, n, receiver) = (&cc.chain, &cc.n, cc.receiver);
    let path = "/gateway/acme/search";
    let payer = address(2);
    let before = chain.balance(payer).await;
    let c = challenge_at(&n[0], path).await;
    let paid = credential_for(&c, 2, receiver, 1_000, |_, _| {});
    let (status, headers, body) = pay_at(&n[1], path, &paid).await;
    assert_eq!(status, 200, "{body}\n{}", n[1].log());
    assert!(headers.contains_key("payment-receipt"));
    let (status, _, body) = pay_at(&n[2], path, &paid).await;
    assert_eq!(status, 402, "{body}");
    assert_eq!(
        body["type"], "https://paymentauth.org/problems/invalid-challenge",
        "{body}"
    );
    assert_eq!(chain.balance(payer).await, before - 1_000);
    assert_eq!(cc.upstream.hits(), 1);
}
