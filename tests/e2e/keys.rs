//! Scoped API keys (issue 32, item 4) through the real binary: a key's role decides what it
//! may call (read, routes, payouts, full), every refusal is `403 FORBIDDEN` naming the role
//! needed and changes nothing, and a key with an expiry is refused from then on.

use crate::common;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};

async fn key_with(gw: &Gateway, full: &str, body: Value) -> (u16, Value) {
    let r = gw.api(full, Method::POST, "/api/keys", Some(body)).await;
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

async fn new_key(gw: &Gateway, full: &str, role: &str) -> String {
    let (status, v) = key_with(gw, full, json!({"role": role})).await;
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["role"], role);
    v["apiKey"].as_str().unwrap().to_string()
}

async fn status(gw: &Gateway, key: &str, method: Method, path: &str, body: Option<Value>) -> u16 {
    gw.api(key, method, path, body).await.status().as_u16()
}

#[tokio::test]
async fn each_role_reaches_what_it_may_and_nothing_else() {
    let gw = Gateway::start().await;
    let (_, full) = gw
        .create_org("acme", Some("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"))
        .await;
    let route = gw.create_route(&full, route_body("/weather")).await;
    let route_path = format!("/api/routes/{}", route["id"].as_str().unwrap());
    let read = new_key(&gw, &full, "read").await;
    let routes = new_key(&gw, &full, "routes").await;
    let payouts = new_key(&gw, &full, "payouts").await;

    // A read-only key reads what the overview and the ledger read.
    for path in [
        "/api/org",
        "/api/routes",
        route_path.as_str(),
        "/api/payments",
        "/api/gateway/metrics?window=24h",
        "/api/usage",
        "/api/keys",
        "/api/access-windows",
        "/corridors",
    ] {
        assert_eq!(
            status(&gw, &read, Method::GET, path, None).await,
            200,
            "{path}"
        );
    }
    // And changes nothing: each write is 403 naming the role it needs.
    let writes: Vec<(Method, &str, Option<Value>, &str)> = vec![
        (
            Method::POST,
            "/api/routes",
            Some(route_body("/other")),
            "routes",
        ),
        (
            Method::PATCH,
            route_path.as_str(),
            Some(json!({"priceUSD": "9"})),
            "routes",
        ),
        (Method::DELETE, route_path.as_str(), None, "routes"),
        (Method::POST, "/api/keys", Some(json!({})), "full"),
        (Method::GET, "/api/origin-secret", None, "full"),
        (Method::POST, "/api/channels/claim", None, "payouts"),
        (Method::GET, "/mcp/sse", None, "full"),
    ];
    for (method, path, body, needed) in writes {
        let (code, err, v) = error_of(gw.api(&read, method.clone(), path, body).await).await;
        assert_eq!(
            (code, err.as_str()),
            (403, "FORBIDDEN"),
            "{method} {path}: {v}"
        );
        let message = v["message"].as_str().unwrap();
        assert!(
            message.contains("role is read") && message.contains(&format!("role {needed}")),
            "{message}"
        );
    }
    let listed: Value = gw
        .api(&full, Method::GET, "/api/routes", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "nothing was created");
    assert_eq!(
        listed[0]["priceUSD"], route["priceUSD"],
        "nothing was changed"
    );

    // A routes key changes routes, not money nor keys.
    assert_eq!(
        status(
            &gw,
            &routes,
            Method::PATCH,
            &route_path,
            Some(json!({"priceUSD": "0.07"}))
        )
        .await,
        200
    );
    assert_eq!(
        status(&gw, &routes, Method::POST, "/api/channels/claim", None).await,
        403
    );
    assert_eq!(
        status(&gw, &routes, Method::POST, "/api/keys", None).await,
        403
    );
    // A payouts key moves money, not routes.
    assert_ne!(
        status(&gw, &payouts, Method::POST, "/api/channels/claim", None).await,
        403
    );
    assert_eq!(
        status(&gw, &payouts, Method::DELETE, &route_path, None).await,
        403
    );
    // The full key does everything, and the keys list shows each key's role.
    let keys: Value = gw
        .api(&full, Method::GET, "/api/keys", None)
        .await
        .json()
        .await
        .unwrap();
    let mut roles: Vec<&str> = keys
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["role"].as_str().unwrap())
        .collect();
    roles.sort();
    assert_eq!(roles, ["full", "payouts", "read", "routes"]);
    assert_eq!(
        status(&gw, &full, Method::DELETE, &route_path, None).await,
        204
    );
}

#[tokio::test]
async fn a_key_expires_and_bad_key_bodies_are_refused() {
    let gw = Gateway::start().await;
    let (_, full) = gw.create_org("acme", None).await;
    let soon = time::OffsetDateTime::now_utc() + time::Duration::seconds(2);
    let soon = soon
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let (code, created) = key_with(&gw, &full, json!({"role": "read", "expiresAt": soon})).await;
    assert_eq!(code, 201, "{created}");
    assert!(created["expiresAt"].is_string());
    let expiring = created["apiKey"].as_str().unwrap().to_string();
    assert_eq!(
        status(&gw, &expiring, Method::GET, "/api/routes", None).await,
        200
    );
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let (code, err, v) = error_of(gw.api(&expiring, Method::GET, "/api/routes", None).await).await;
    assert_eq!((code, err.as_str()), (401, "UNAUTHORIZED"), "{v}");
    assert!(v["message"].as_str().unwrap().contains("expired"), "{v}");

    for (body, field) in [
        (json!({"role": "admin"}), "role"),
        (json!({"expiresAt": "2020-01-01T00:00:00Z"}), "expiresAt"),
        (json!({"expiresAt": "tomorrow"}), "expiresAt"),
        (json!({"scope": "read"}), "scope"),
    ] {
        let (code, err, v) = error_of(
            gw.api(&full, Method::POST, "/api/keys", Some(body.clone()))
                .await,
        )
        .await;
        assert_eq!(
            (code, err.as_str()),
            (400, "VALIDATION_ERROR"),
            "{body}: {v}"
        );
        assert_eq!(v["details"][0]["field"], field, "{body}: {v}");
    }
    // No body: a full key, as before roles existed.
    let r = gw
        .http
        .post(gw.url("/api/keys"))
        .bearer_auth(&full)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (v["role"].as_str(), v["expiresAt"].is_null()),
        (Some("full"), true)
    );
}
