//! End-to-end: organisations, keys and route management through the real binary.

use crate::common;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};

mod validation;

#[tokio::test]
async fn route_lifecycle_is_enforced_at_once_and_survives_restart() {
    let mut gw = Gateway::start().await;
    let (_, key) = gw.create_org("acme", Some(WALLET_A)).await;

    // Created, then immediately challenged.
    let r1 = gw.create_route(&key, route_body("echo")).await;
    assert_eq!(r1["path"], "/echo");
    assert_eq!(r1["priceUSD"], json!(0.01));
    assert_eq!(r1["active"], true);
    assert_eq!(r1["streaming"], false);
    assert_eq!(r1["discoverable"], false);
    assert!(r1["orgId"].as_str().unwrap().starts_with("org_"));
    let id1 = r1["id"].as_str().unwrap().to_string();
    assert_eq!(gw.get("/gateway/acme/echo").await.status(), 402);

    // A second route; the list is newest first.
    let r2 = gw.create_route(&key, route_body("/v1/weather")).await;
    let id2 = r2["id"].as_str().unwrap().to_string();
    let list: Value = gw
        .api(&key, Method::GET, "/api/routes", None)
        .await
        .json()
        .await
        .unwrap();
    let ids: Vec<_> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id2.as_str(), id1.as_str()]);

    // Price change is served by the very next request.
    let r = gw
        .api(
            &key,
            Method::PATCH,
            &format!("/api/routes/{id1}"),
            Some(json!({"priceUSD": 0.25})),
        )
        .await;
    assert_eq!(r.status(), 200);
    let patched: Value = r.json().await.unwrap();
    assert_eq!(patched["priceUSD"], json!(0.25));
    assert_eq!(
        patched["description"], "route echo",
        "untouched fields are kept"
    );
    let body: Value = gw.get("/gateway/acme/echo").await.json().await.unwrap();
    assert_eq!(body["accepts"][0]["maxAmountRequired"], "250000");

    // Deactivated -> 404 at once; reactivated -> 402 again.
    let r = gw
        .api(
            &key,
            Method::PATCH,
            &format!("/api/routes/{id1}"),
            Some(json!({"active": false})),
        )
        .await;
    assert_eq!(r.status(), 200);
    let (status, code, _) = error_of(gw.get("/gateway/acme/echo").await).await;
    assert_eq!((status, code.as_str()), (404, "ROUTE_NOT_FOUND"));
    gw.api(
        &key,
        Method::PATCH,
        &format!("/api/routes/{id1}"),
        Some(json!({"active": true})),
    )
    .await;
    assert_eq!(gw.get("/gateway/acme/echo").await.status(), 402);

    // Path change moves the route.
    let r = gw
        .api(
            &key,
            Method::PATCH,
            &format!("/api/routes/{id1}"),
            Some(json!({"path": "echo2/"})),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(gw.get("/gateway/acme/echo").await.status(), 404);
    assert_eq!(gw.get("/gateway/acme/echo2").await.status(), 402);

    // Deleted -> 204, then 404 everywhere.
    let r = gw
        .api(&key, Method::DELETE, &format!("/api/routes/{id1}"), None)
        .await;
    assert_eq!(r.status(), 204);
    assert!(r.bytes().await.unwrap().is_empty());
    let (status, code, _) = error_of(gw.get("/gateway/acme/echo2").await).await;
    assert_eq!((status, code.as_str()), (404, "ROUTE_NOT_FOUND"));
    let (status, code, _) = error_of(
        gw.api(&key, Method::DELETE, &format!("/api/routes/{id1}"), None)
            .await,
    )
    .await;
    assert_eq!((status, code.as_str()), (404, "NOT_FOUND"));

    // Restart: what was acknowledged is still there and still served.
    gw.restart().await;
    let list: Value = gw
        .api(&key, Method::GET, "/api/routes", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["id"], json!(id2));
    let body: Value = gw
        .get("/gateway/acme/v1/weather")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["accepts"][0]["maxAmountRequired"], "10000");
}

#[tokio::test]
async fn duplicate_paths_and_other_orgs_routes() {
    let gw = Gateway::start().await;
    let (_, a) = gw.create_org("alpha", Some(WALLET_A)).await;
    let (_, b) = gw.create_org("beta", Some(WALLET_B)).await;
    let ra = gw.create_route(&a, route_body("data")).await;
    let ra_id = ra["id"].as_str().unwrap();

    // Same path in the same org: 409, with or without the leading slash.
    let (status, code, _) = error_of(
        gw.api(&a, Method::POST, "/api/routes", Some(route_body("/data")))
            .await,
    )
    .await;
    assert_eq!((status, code.as_str()), (409, "DUPLICATE_PATH"));
    // Same path in another org is fine.
    gw.create_route(&b, route_body("data")).await;
    // Moving a route onto a taken path: 409 and nothing changes.
    let other = gw.create_route(&a, route_body("other")).await;
    let (status, code, _) = error_of(
        gw.api(
            &a,
            Method::PATCH,
            &format!("/api/routes/{}", other["id"].as_str().unwrap()),
            Some(json!({"path": "data", "priceUSD": 5})),
        )
        .await,
    )
    .await;
    assert_eq!((status, code.as_str()), (409, "DUPLICATE_PATH"));
    let body: Value = gw.get("/gateway/alpha/other").await.json().await.unwrap();
    assert_eq!(
        body["accepts"][0]["maxAmountRequired"], "10000",
        "price unchanged"
    );

    // Beta cannot see, change or delete alpha's route.
    for (method, body) in [
        (Method::GET, None),
        (Method::PATCH, Some(json!({"priceUSD": 9}))),
        (Method::DELETE, None),
    ] {
        let (status, code, _) = error_of(
            gw.api(&b, method, &format!("/api/routes/{ra_id}"), body)
                .await,
        )
        .await;
        assert_eq!((status, code.as_str()), (404, "NOT_FOUND"));
    }
    let list: Value = gw
        .api(&b, Method::GET, "/api/routes", None)
        .await
        .json()
        .await
        .unwrap();
    assert!(list
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["id"] != json!(ra_id)));
    assert_eq!(gw.get("/gateway/alpha/data").await.status(), 402);
}

#[tokio::test]
async fn bad_missing_and_revoked_keys_are_refused() {
    let gw = Gateway::start().await;
    let (org, key) = gw.create_org("acme", Some(WALLET_A)).await;

    let no_auth = gw.http.get(gw.url("/api/routes")).send().await.unwrap();
    let (status, code, _) = error_of(no_auth).await;
    assert_eq!((status, code.as_str()), (401, "UNAUTHORIZED"));
    for bad in [
        "garbage".to_string(),
        format!("{key}x"),
        key.replace("pgk_", "pgk_0"),
        format!("{}_{}", &key[..20], "0".repeat(64)),
    ] {
        let (status, code, _) =
            error_of(gw.api(&bad, Method::GET, "/api/routes", None).await).await;
        assert_eq!((status, code.as_str()), (401, "UNAUTHORIZED"), "key {bad}");
    }

    // A second key works; revoking the first stops it at once, the second keeps working.
    let r = gw.admin(Method::POST, "/admin/orgs/acme/keys", None).await;
    assert_eq!(r.status(), 201);
    let second: Value = r.json().await.unwrap();
    let second_key = second["apiKey"].as_str().unwrap();
    assert_eq!(
        gw.api(second_key, Method::GET, "/api/routes", None)
            .await
            .status(),
        200
    );
    let key_id = org["keyId"].as_str().unwrap();
    let r = gw
        .admin(
            Method::DELETE,
            &format!("/admin/orgs/acme/keys/{key_id}"),
            None,
        )
        .await;
    assert_eq!(r.status(), 204);
    let (status, code, _) = error_of(gw.api(&key, Method::GET, "/api/routes", None).await).await;
    assert_eq!((status, code.as_str()), (401, "UNAUTHORIZED"));
    assert_eq!(
        gw.api(second_key, Method::GET, "/api/routes", None)
            .await
            .status(),
        200
    );
    // Keys are listed without secrets.
    let keys: Value = gw
        .admin(Method::GET, "/admin/orgs/acme/keys", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(keys.as_array().unwrap().len(), 2);
    assert!(!keys.to_string().contains(&key[20..]));

    // The admin API wants the admin token, not an org key.
    let (status, code, _) = error_of(
        gw.http
            .get(gw.url("/admin/orgs"))
            .bearer_auth(second_key)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, code.as_str()), (401, "UNAUTHORIZED"));
    // The stored key material is a hash: the plain key appears nowhere in the data dir.
    gw.stop_and_grep(second_key);
}

impl Gateway {
    /// Stops the gateway and asserts no file of the data dir contains `needle`.
    fn stop_and_grep(mut self, needle: &str) {
        assert!(self.stop());
        let secret = needle.rsplit('_').next().unwrap();
        for entry in walk(&self.dir.path().join("data")) {
            let bytes = std::fs::read(&entry).unwrap();
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "plain API key secret found in {}",
                entry.display()
            );
        }
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test]
async fn idempotency_key_replays_and_conflicts() {
    let gw = Gateway::start().await;
    let (_, key) = gw.create_org("acme", Some(WALLET_A)).await;
    let post = |body: Value, idem: &'static str| {
        gw.http
            .post(gw.url("/api/routes"))
            .bearer_auth(&key)
            .header("Idempotency-Key", idem)
            .json(&body)
            .send()
    };
    let first = post(route_body("echo"), "k-1").await.unwrap();
    assert_eq!(first.status(), 201);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first: Value = first.json().await.unwrap();

    let again = post(route_body("echo"), "k-1").await.unwrap();
    assert_eq!(again.status(), 201);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let again: Value = again.json().await.unwrap();
    assert_eq!(again, first);

    let (status, code, _) = error_of(post(route_body("other"), "k-1").await.unwrap()).await;
    assert_eq!((status, code.as_str()), (409, "DUPLICATE_REQUEST"));

    // Concurrent retries of one creation with a fresh key: one route, identical answers.
    let many =
        futures_util::future::join_all((0..12).map(|_| post(route_body("burst"), "k-2"))).await;
    let mut ids = std::collections::BTreeSet::new();
    for r in many {
        let r = r.unwrap();
        assert_eq!(r.status(), 201);
        ids.insert(
            r.json::<Value>().await.unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!(ids.len(), 1, "one creation for one key");
    let list: Value = gw
        .api(&key, Method::GET, "/api/routes", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list.as_array().unwrap().len(), 2);

    // PATCH with a key: replayed, and a different body with the same key conflicts.
    let id = first["id"].as_str().unwrap();
    let patch = |body: Value| {
        gw.http
            .patch(gw.url(&format!("/api/routes/{id}")))
            .bearer_auth(&key)
            .header("Idempotency-Key", "p-1")
            .json(&body)
            .send()
    };
    let p1 = patch(json!({"priceUSD": 2})).await.unwrap();
    assert_eq!(p1.status(), 200);
    let p2 = patch(json!({"priceUSD": 2})).await.unwrap();
    assert_eq!(p2.headers()["idempotent-replayed"], "true");
    let (status, code, _) = error_of(patch(json!({"priceUSD": 3})).await.unwrap()).await;
    assert_eq!((status, code.as_str()), (409, "DUPLICATE_REQUEST"));
    let body: Value = gw.get("/gateway/acme/echo").await.json().await.unwrap();
    assert_eq!(body["accepts"][0]["maxAmountRequired"], "2000000");

    // Keys are scoped per organisation.
    let (_, other) = gw.create_org("other", Some(WALLET_B)).await;
    let r = gw
        .http
        .post(gw.url("/api/routes"))
        .bearer_auth(&other)
        .header("Idempotency-Key", "k-1")
        .json(&route_body("echo"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert!(r.headers().get("idempotent-replayed").is_none());
}
