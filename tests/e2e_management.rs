//! End-to-end: organisations, keys and route management through the real binary.

mod common;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};

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

#[tokio::test]
async fn invalid_input_is_refused_with_details_and_changes_nothing() {
    // A small body limit keeps the oversized upload inside the socket buffers, so the client has
    // finished sending when the 413 arrives.
    let gw = Gateway::start_with(&[("PAYGATE__SERVER__MAX_BODY_BYTES", "4096")]).await;
    let (_, key) = gw.create_org("acme", Some(WALLET_A)).await;
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"priceUSD": 0.01, "targetUrl": "https://x.io", "network": "base-sepolia"}),
            "path",
        ),
        (
            json!({"path": "a", "targetUrl": "https://x.io", "network": "base-sepolia"}),
            "priceUSD",
        ),
        (
            json!({"path": "a", "priceUSD": 0, "targetUrl": "https://x.io", "network": "base-sepolia"}),
            "priceUSD",
        ),
        (
            json!({"path": "a", "priceUSD": -1, "targetUrl": "https://x.io", "network": "base-sepolia"}),
            "priceUSD",
        ),
        (
            json!({"path": "a", "priceUSD": 0.0000001, "targetUrl": "https://x.io", "network": "base-sepolia"}),
            "priceUSD",
        ),
        (
            json!({"path": "a", "priceUSD": 1000001, "targetUrl": "https://x.io", "network": "base-sepolia"}),
            "priceUSD",
        ),
        (
            json!({"path": "a", "priceUSD": "0.0000001", "targetUrl": "https://x.io", "network": "base-sepolia"}),
            "priceUSD",
        ),
        (
            json!({"path": "a", "priceUSD": [0.01], "targetUrl": "https://x.io", "network": "base-sepolia"}),
            "priceUSD",
        ),
        (
            json!({"path": "a", "priceUSD": 0.01, "targetUrl": "ftp://x.io", "network": "base-sepolia"}),
            "targetUrl",
        ),
        (
            json!({"path": "a", "priceUSD": 0.01, "targetUrl": "not a url", "network": "base-sepolia"}),
            "targetUrl",
        ),
        (
            json!({"path": "a", "priceUSD": 0.01, "targetUrl": "https://x.io", "network": "ethereum"}),
            "network",
        ),
        (
            json!({"path": "a/../b", "priceUSD": 0.01, "targetUrl": "https://x.io", "network": "base-sepolia"}),
            "path",
        ),
        (
            json!({"path": "a?b=1", "priceUSD": 0.01, "targetUrl": "https://x.io", "network": "base-sepolia"}),
            "path",
        ),
        (
            json!({"path": "a", "priceUSD": 0.01, "targetUrl": "https://x.io", "network": "base-sepolia", "active": "yes"}),
            "active",
        ),
        (
            json!({"path": "a", "priceUSD": 0.01, "targetUrl": "https://x.io", "network": "base-sepolia", "colour": "red"}),
            "colour",
        ),
        (
            json!({"path": "a", "priceUSD": 0.01, "targetUrl": "https://x.io", "network": "base-sepolia", "id": "rt_x"}),
            "id",
        ),
        (
            json!({"path": "a", "priceUSD": 0.01, "targetUrl": "https://x.io", "network": "base-sepolia", "description": "nul\u{0}here"}),
            "description",
        ),
    ];
    for (body, field) in cases {
        let (status, code, err) = error_of(
            gw.api(&key, Method::POST, "/api/routes", Some(body.clone()))
                .await,
        )
        .await;
        assert_eq!((status, code.as_str()), (400, "VALIDATION_ERROR"), "{body}");
        assert!(err["message"].as_str().unwrap().contains(field), "{err}");
        assert!(
            err["details"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d["field"] == json!(field)),
            "{err}"
        );
    }
    // A price given as a string says what it must be (strings are accepted), and a negative
    // one that it must be positive.
    for (price, words) in [("abc", "decimal string"), ("-0.5", "greater than 0")] {
        let body = json!({"path": "a", "priceUSD": price, "targetUrl": "https://x.io", "network": "base-sepolia"});
        let (_, code, err) =
            error_of(gw.api(&key, Method::POST, "/api/routes", Some(body)).await).await;
        assert_eq!(code, "VALIDATION_ERROR");
        assert!(
            err["message"].as_str().unwrap().contains(words),
            "{price}: {err}"
        );
    }
    // A body declared as text or a form is not read as JSON: 415, nothing created.
    for media in ["text/plain", "application/x-www-form-urlencoded"] {
        let r = gw
            .http
            .post(gw.url("/api/routes"))
            .bearer_auth(&key)
            .header("content-type", media)
            .body(r#"{"path": "/plain", "priceUSD": 0.01, "targetUrl": "https://x.io", "network": "base-sepolia"}"#)
            .send()
            .await
            .unwrap();
        let (status, code, err) = error_of(r).await;
        assert_eq!(
            (status, code.as_str()),
            (415, "UNSUPPORTED_MEDIA_TYPE"),
            "{err}"
        );
        assert!(
            err["message"]
                .as_str()
                .unwrap()
                .contains("application/json"),
            "{err}"
        );
    }
    // A network this deployment does not settle (Base: no RPC here) is refused by either
    // spelling, and the problem names the networks it does settle.
    for n in ["base", "eip155:8453"] {
        let body = json!({"path": "a", "priceUSD": 1, "targetUrl": "http://x.io", "network": n});
        let (status, code, err) =
            error_of(gw.api(&key, Method::POST, "/api/routes", Some(body)).await).await;
        assert_eq!((status, code.as_str()), (400, "VALIDATION_ERROR"), "{err}");
        assert_eq!(err["details"][0]["field"], "network", "{err}");
        assert_eq!(
            err["details"][0]["problem"],
            "must be a network this deployment settles: base-sepolia, eip155:84532",
            "{err}"
        );
    }
    // ...as /facilitator/supported lists them.
    let supported: Value = gw.get("/facilitator/supported").await.json().await.unwrap();
    let networks: Vec<&str> = supported["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["network"].as_str().unwrap())
        .collect();
    assert_eq!(networks, ["base-sepolia", "eip155:84532"], "{supported}");
    // Both spellings of a settled network are accepted and stored as given.
    for n in ["base-sepolia", "eip155:84532"] {
        let path = format!("n-{}", n.replace(':', "-"));
        let r = gw
            .create_route(
                &key,
                json!({"path": path, "priceUSD": 1, "targetUrl": "http://x.io", "network": n}),
            )
            .await;
        assert_eq!(r["network"], n);
    }
    // Malformed JSON and non-objects: BAD_REQUEST.
    for raw in ["{", "[]", "null", "\"x\""] {
        let r = gw
            .http
            .post(gw.url("/api/routes"))
            .bearer_auth(&key)
            .header("content-type", "application/json")
            .body(raw)
            .send()
            .await
            .unwrap();
        let (status, code, _) = error_of(r).await;
        assert_eq!((status, code.as_str()), (400, "BAD_REQUEST"), "{raw}");
    }
    // Oversized body: 413 as JSON.
    let big = format!("{{\"description\": \"{}\"}}", "x".repeat(16 << 10));
    let r = gw
        .http
        .post(gw.url("/api/routes"))
        .bearer_auth(&key)
        .body(big)
        .send()
        .await
        .unwrap();
    let (status, code, _) = error_of(r).await;
    assert_eq!((status, code.as_str()), (413, "PAYLOAD_TOO_LARGE"));
    // A bad PATCH changes nothing, even when some of its fields are fine.
    let r = gw.create_route(&key, route_body("keep")).await;
    let id = r["id"].as_str().unwrap();
    let (status, code, _) = error_of(
        gw.api(
            &key,
            Method::PATCH,
            &format!("/api/routes/{id}"),
            Some(json!({"priceUSD": 3, "network": "nope"})),
        )
        .await,
    )
    .await;
    assert_eq!((status, code.as_str()), (400, "VALIDATION_ERROR"));
    let now: Value = gw
        .api(&key, Method::GET, &format!("/api/routes/{id}"), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(now, r);
    // Only the good creations exist.
    let list: Value = gw
        .api(&key, Method::GET, "/api/routes", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list.as_array().unwrap().len(), 3);
    // Unknown endpoints and methods answer JSON too.
    let (status, code, _) = error_of(gw.get("/nope").await).await;
    assert_eq!((status, code.as_str()), (404, "NOT_FOUND"));
    let r = gw
        .http
        .put(gw.url("/api/routes"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    let (status, code, _) = error_of(r).await;
    assert_eq!((status, code.as_str()), (405, "METHOD_NOT_ALLOWED"));
}

#[tokio::test]
async fn admin_api_validates_and_controls_orgs() {
    let gw = Gateway::start().await;
    let r = gw
        .http
        .post(gw.url("/admin/orgs"))
        .bearer_auth("wrong")
        .json(&json!({"slug": "x"}))
        .send()
        .await
        .unwrap();
    let (status, code, _) = error_of(r).await;
    assert_eq!((status, code.as_str()), (401, "UNAUTHORIZED"));
    for body in [
        json!({"slug": "Bad Slug"}),
        json!({"slug": "demo"}),
        json!({"slug": "ok", "receiverWallet": "0x1234"}),
        json!({"slug": "ok", "plan": "platinum"}),
        json!({}),
    ] {
        let (status, code, _) = error_of(
            gw.admin(Method::POST, "/admin/orgs", Some(body.clone()))
                .await,
        )
        .await;
        assert_eq!((status, code.as_str()), (400, "VALIDATION_ERROR"), "{body}");
    }
    gw.create_org("acme", None).await;
    let (status, code, _) = error_of(
        gw.admin(Method::POST, "/admin/orgs", Some(json!({"slug": "acme"})))
            .await,
    )
    .await;
    assert_eq!((status, code.as_str()), (409, "ALREADY_EXISTS"));
    let r = gw
        .admin(
            Method::PATCH,
            "/admin/orgs/acme",
            Some(json!({"plan": "pro", "receiverWallet": WALLET_A.to_lowercase()})),
        )
        .await;
    assert_eq!(r.status(), 200);
    let org: Value = r.json().await.unwrap();
    assert_eq!(org["plan"], "pro");
    assert_eq!(org["receiverWallet"], WALLET_A, "stored checksummed");
    let (status, code, _) = error_of(gw.admin(Method::GET, "/admin/orgs/nobody", None).await).await;
    assert_eq!((status, code.as_str()), (404, "NOT_FOUND"));
}

/// The payer wallet for MCP tool calls: stored sealed under the master key from the
/// environment, shown only as its address, never readable in the data files.
#[tokio::test]
async fn payer_wallet_is_stored_sealed_and_never_returned() {
    const KEY: &str = "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a";
    const ADDRESS: &str = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC";
    // Without a master key: refused, nothing stored.
    let gw = Gateway::start().await;
    gw.create_org("acme", None).await;
    let r = gw
        .admin(
            Method::PUT,
            "/admin/orgs/acme/payer-wallet",
            Some(json!({"privateKey": KEY})),
        )
        .await;
    let (status, code, _) = error_of(r).await;
    assert_eq!((status, code.as_str()), (503, "MISCONFIGURED"));
    drop(gw);

    let mut gw = Gateway::start_with(&[(
        "PAYGATE_MASTER_KEY",
        "8f2c1d4e5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f",
    )])
    .await;
    gw.create_org("acme", None).await;
    for bad in [
        json!({}),
        json!({"privateKey": "0x1234"}),
        json!({"privateKey": KEY, "x": 1}),
    ] {
        let r = gw
            .admin(
                Method::PUT,
                "/admin/orgs/acme/payer-wallet",
                Some(bad.clone()),
            )
            .await;
        assert_eq!(error_of(r).await.0, 400, "{bad}");
    }
    let r = gw
        .admin(
            Method::PUT,
            "/admin/orgs/acme/payer-wallet",
            Some(json!({"privateKey": KEY})),
        )
        .await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["payerWallet"], ADDRESS);
    let shown = body.to_string().to_lowercase();
    assert!(!shown.contains(&KEY[2..]), "the key is never returned");
    let r = gw.admin(Method::GET, "/admin/orgs/acme", None).await;
    let org: Value = r.json().await.unwrap();
    assert_eq!(org["payerWallet"], ADDRESS);
    assert!(!org.to_string().to_lowercase().contains(&KEY[2..]));
    // An API key cannot set it.
    let (_, org_key) = gw.create_org("globex", None).await;
    let r = gw
        .api(
            &org_key,
            Method::PUT,
            "/admin/orgs/globex/payer-wallet",
            Some(json!({"privateKey": KEY})),
        )
        .await;
    assert_eq!(r.status(), 401);

    // At rest: neither the hex key nor its raw bytes appear in any data file.
    assert!(gw.stop());
    let raw_key = alloy_primitives::hex::decode(&KEY[2..]).unwrap();
    for entry in walk(&gw.dir.path().join("data")) {
        let bytes = std::fs::read(&entry).unwrap();
        let hay = String::from_utf8_lossy(&bytes).to_lowercase();
        assert!(
            !hay.contains(&KEY[2..]),
            "plaintext key in {}",
            entry.display()
        );
        assert!(
            !bytes.windows(32).any(|w| w == raw_key.as_slice()),
            "raw key in {}",
            entry.display()
        );
    }
    assert!(
        !gw.log().to_lowercase().contains(&KEY[2..]),
        "the key is never logged"
    );
    gw.restart().await;
    let r = gw
        .admin(Method::DELETE, "/admin/orgs/acme/payer-wallet", None)
        .await;
    assert_eq!(r.status(), 204);
    let org: Value = gw
        .admin(Method::GET, "/admin/orgs/acme", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(org["payerWallet"], Value::Null);
}

/// An answer the control plane decides from the headers alone (here 401, no key) used to leave
/// the request body unread; the control plane then closed the connection, and the body or the
/// proxy's next request on that pooled connection met a closed socket (`Broken pipe`, now and
/// then a `503` for a request never handled: about 1 in 2,000 under this load). Every client
/// whose body trails its headers gets its own answer, and no connection is broken.
#[tokio::test]
async fn answers_decided_from_headers_leave_the_control_plane_connection_whole() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let gw = Gateway::start().await;
    let body = vec![b' '; 8192];
    let head = format!(
        "POST /api/routes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let clients = (0..6).map(|_| {
        let (head, body, port) = (head.clone(), body.clone(), gw.port);
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            for _ in 0..60 {
                let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .unwrap();
                s.write_all(head.as_bytes()).await.unwrap();
                // The body may meet a connection the gateway closed after answering: fine.
                let _ = s.write_all(&body).await;
                let mut answer = Vec::new();
                let _ = s.read_to_end(&mut answer).await;
                statuses
                    .push(String::from_utf8_lossy(&answer[..answer.len().min(12)]).into_owned());
            }
            statuses
        })
    });
    let mut seen = std::collections::BTreeMap::<String, u32>::new();
    for c in clients {
        for s in c.await.unwrap() {
            *seen.entry(s).or_default() += 1;
        }
    }
    assert_eq!(seen, [("HTTP/1.1 401".to_string(), 360)].into());
    let log = gw.log();
    assert!(!log.contains("Broken pipe"), "{log}");
}
