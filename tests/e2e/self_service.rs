//! What an organisation does for itself through the real binary: lists its corridors and each
//! corridor's payouts page by page, and manages its own API keys (create, list, rotate,
//! revoke; never its last one; never another organisation's).

use crate::common;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};

async fn ok(gw: &Gateway, key: &str, method: Method, path: &str) -> Value {
    let r = gw.api(key, method, path, None).await;
    assert!(r.status().is_success(), "{path}: {}", r.status());
    r.json().await.unwrap()
}

#[tokio::test]
async fn corridors_and_their_payouts_are_listed_page_by_page() {
    let gw = Gateway::start().await;
    let (_, key) = gw.create_org("acme", Some(WALLET_A)).await;
    let (_, other) = gw.create_org("globex", Some(WALLET_A)).await;
    assert_eq!(ok(&gw, &key, Method::GET, "/corridors").await, json!([]));
    let brl = gw.active_corridor(&key, "BRL").await;
    let mxn = gw.active_corridor(&key, "MXN").await;
    gw.active_corridor(&other, "BRL").await;
    let list = ok(&gw, &key, Method::GET, "/corridors").await;
    let ids: Vec<_> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].clone())
        .collect();
    assert_eq!(ids, [json!(brl), json!(mxn)]);
    assert_eq!(list[0]["destCurrency"], "BRL");
    assert_eq!(list[0]["status"], "ACTIVE");

    // Five payouts on the BRL corridor.
    let mut paid = Vec::new();
    for i in 0..5 {
        let q = ok(
            &gw,
            &key,
            Method::GET,
            &format!("/corridors/{brl}/quote?amount=10"),
        )
        .await;
        let body = json!({
            "quoteId": q["quoteId"], "fromAddress": WALLET_B, "amountUSDC": q["amount"],
            "beneficiary": {"name": "Ana Souza", "bankName": "Banco Teste",
                            "accountNumber": "0001-23456-7", "country": "BR", "currency": "BRL"},
        });
        let r = gw.pay_corridor(&key, &brl, &format!("k{i}"), &body).await;
        assert_eq!(r.status(), 202);
        let v: Value = r.json().await.unwrap();
        paid.push(v["paymentId"].as_str().unwrap().to_string());
    }
    paid.reverse();
    let mut listed = Vec::new();
    let mut cursor = String::new();
    loop {
        let path = format!("/corridors/{brl}/payments?limit=2{cursor}");
        let page = ok(&gw, &key, Method::GET, &path).await;
        for p in page["payments"].as_array().unwrap() {
            assert_eq!(p["amountUSDC"], "10.000000", "{p}");
            listed.push(p["paymentId"].as_str().unwrap().to_string());
        }
        match page["nextCursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(listed, paid);
    let empty = ok(
        &gw,
        &key,
        Method::GET,
        &format!("/corridors/{mxn}/payments"),
    )
    .await;
    assert_eq!(empty, json!({"payments": [], "nextCursor": null}));

    // Another organisation sees neither the corridor nor its payouts; bad pages are named.
    let r = gw
        .api(
            &other,
            Method::GET,
            &format!("/corridors/{brl}/payments"),
            None,
        )
        .await;
    assert_eq!(error_of(r).await.0, 404);
    assert_eq!(
        ok(&gw, &other, Method::GET, "/corridors")
            .await
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let r = gw
        .api(
            &key,
            Method::GET,
            &format!("/corridors/{brl}/payments?limit=0&cursor=a%20b"),
            None,
        )
        .await;
    let (status, code, body) = error_of(r).await;
    assert_eq!((status, code.as_str()), (400, "VALIDATION_ERROR"));
    assert_eq!(body["details"].as_array().unwrap().len(), 2, "{body}");
}

async fn revoke(gw: &Gateway, key: &str, key_id: &str) -> reqwest::Response {
    let path = format!("/api/keys/{key_id}");
    gw.api(key, Method::DELETE, &path, None).await
}

#[tokio::test]
async fn an_org_rotates_its_own_keys_and_keeps_one() {
    let gw = Gateway::start().await;
    let (_, first) = gw.create_org("acme", Some(WALLET_A)).await;
    let (_, other) = gw.create_org("globex", Some(WALLET_A)).await;
    let keys = ok(&gw, &first, Method::GET, "/api/keys").await;
    assert_eq!(keys.as_array().unwrap().len(), 1);
    let first_id = keys[0]["keyId"].as_str().unwrap().to_string();
    assert!(
        !keys.to_string().contains(&first),
        "a secret is never listed"
    );

    // The last active key cannot be revoked.
    let r = revoke(&gw, &first, &first_id).await;
    let (status, code, _) = error_of(r).await;
    assert_eq!((status, code.as_str()), (409, "LAST_ACTIVE_KEY"));

    // Rotation: create, both work, revoke the old one with the new one.
    let r = gw.api(&first, Method::POST, "/api/keys", None).await;
    assert_eq!(r.status(), 201);
    let created: Value = r.json().await.unwrap();
    let second = created["apiKey"].as_str().unwrap().to_string();
    for k in [&first, &second] {
        assert_eq!(
            ok(&gw, k, Method::GET, "/api/keys")
                .await
                .as_array()
                .unwrap()
                .len(),
            2
        );
    }
    // Another organisation cannot touch it.
    let r = revoke(&gw, &other, &first_id).await;
    assert_eq!(error_of(r).await.0, 404);
    let r = revoke(&gw, &second, &first_id).await;
    assert_eq!(r.status(), 204);
    assert_eq!(
        error_of(gw.api(&first, Method::GET, "/api/keys", None).await)
            .await
            .0,
        401
    );
    let keys = ok(&gw, &second, Method::GET, "/api/keys").await;
    let revoked: Vec<_> = keys
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| !k["revokedAt"].is_null())
        .map(|k| k["keyId"].as_str().unwrap())
        .collect();
    assert_eq!(revoked, [first_id.as_str()]);
    // Revoking again is a no-op.
    let r = revoke(&gw, &second, &first_id).await;
    assert_eq!(r.status(), 204);
}
