//! `paygate audit` (issue 52): the ledger against the chain. After real payments (`exact`,
//! `auth-capture` captured, refunded and voided) on anvil it finds no difference; once the
//! ledger is made to lie (a settled payment recorded failed, a refund forgotten) it lists each
//! of those payments and exits 1.

use crate::common;

use common::chain::{address, Chain, PaymentSpec, KEYS};
use common::*;
use paygate_domain::model::PaymentStatus;
use serde_json::{json, Value};

const PRICE: u64 = 10_000;

async fn audit(gw: &Gateway, key: &str) -> (bool, Value) {
    let (ok, out, err) = cli(gw, Some(key), &["audit", "--json"]).await;
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{out}\n{err}"));
    (ok, v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_finds_the_ledger_and_the_chain_agree_and_lists_each_lie() {
    let chain = Chain::start();
    let mut gw = Gateway::start_with_owned(chain.gateway_env()).await;
    let upstream = common::upstream::Upstream::start().await;
    let receiver = address(9);
    let (_, key) = gw
        .create_org("acme", Some(&receiver.to_checksum(None)))
        .await;
    gw.create_route(
        &key,
        json!({"path": "echo", "priceUSD": 0.01, "targetUrl": format!("{}/echo", upstream.url),
               "network": "base-sepolia"}),
    )
    .await;
    common::escrow::refundable_route(&gw, &key, "held", 3600, &upstream).await;
    for payer in [1, 2] {
        let r = pay_v1(&gw, &PaymentSpec::new(payer, receiver, PRICE)).await;
        assert_eq!(r.status(), 200);
    }
    let pay = |path: &str, payer: usize| {
        let input = json!({"url": gw.url(path), "key": KEYS[payer], "rpc": chain.rpc, "calls": 1});
        node_json("x402_permit2_pay.cjs", &input)["results"][0].clone()
    };
    assert_eq!(pay("/gateway/acme/held", 3)["status"], 200);
    assert_eq!(
        pay("/gateway/acme/held?upstream_status=500", 3)["status"],
        500
    );
    common::escrow::approve_refunds(&chain, 9).await;
    let captured = common::escrow::ledger_confirmed(&gw, &key)
        .await
        .iter()
        .find(|p| p["status"] == "SETTLED" && p["routePath"] == "/held")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = gw
        .http
        .post(gw.url(&format!("/api/payments/{captured}/refund")))
        .bearer_auth(&key)
        .header("Idempotency-Key", "audit-refund")
        .json(&json!({"amountUSDC": "0.004"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // The ledger and the chain agree: two exact payments, one captured and partly refunded,
    // one voided.
    let (ok, all) = audit(&gw, &key).await;
    assert!(ok, "{all}");
    assert_eq!(
        (all["checked"].as_u64(), &all["differences"]),
        (Some(4), &json!([]))
    );
    // A bad range is a clear error.
    let (ok, _, err) = cli(&gw, Some(&key), &["audit", "--from", "yesterday"]).await;
    assert!(!ok && err.contains("from"), "{err}");

    // The ledger made to lie: the newest exact payment recorded failed, the refund forgotten.
    let exact: Value = gw
        .api(&key, reqwest::Method::GET, "/api/payments?limit=10", None)
        .await
        .json()
        .await
        .unwrap();
    let settled = exact["payments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["routePath"] == "/echo")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(gw.stop());
    {
        let store = gw.store().await;
        let mut p = store.get_payment(&settled).await.unwrap().unwrap();
        p.status = PaymentStatus::Failed;
        store.update_payment(&p).await.unwrap();
        let mut p = store.get_payment(&captured).await.unwrap().unwrap();
        p.escrow.as_mut().unwrap().refunds.clear();
        store.update_payment(&p).await.unwrap();
        store.flush().await.unwrap();
    }
    gw.restart().await;
    let (ok, all) = audit(&gw, &key).await;
    assert!(!ok, "a difference exits 1: {all}");
    let mut found: Vec<(String, String)> = all["differences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["paymentId"].as_str().unwrap().to_string(),
                d["transfer"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    found.sort();
    let mut want = vec![
        (settled.clone(), "eip3009".to_string()),
        (captured.clone(), "auth-capture".to_string()),
    ];
    want.sort();
    assert_eq!(found, want, "{all}");
    assert_eq!(all["checked"].as_u64(), Some(4), "{all}");
}
