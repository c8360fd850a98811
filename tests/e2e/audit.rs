//! The audit log (issue 32, item 5) through the real binary: each management change is listed,
//! newest first, with who made it (the key's id, or `admin`), what changed (before and after, no
//! secret) and from where (the client address, the request id); an organisation sees its own
//! entries only, a read-only key may list them, and pages follow the cursor.

use crate::common;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};

async fn audit(gw: &Gateway, key: &str, query: &str) -> Value {
    let r = gw
        .api(key, Method::GET, &format!("/api/audit{query}"), None)
        .await;
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

#[tokio::test]
async fn every_management_change_is_recorded_with_who_what_and_where() {
    let gw = Gateway::start().await;
    let (org, full) = gw.create_org("acme", None).await;
    let full_id = org["keyId"].as_str().unwrap().to_string();
    let route = gw.create_route(&full, route_body("/weather")).await;
    let id = route["id"].as_str().unwrap();
    let r = gw
        .http
        .patch(gw.url(&format!("/api/routes/{id}")))
        .bearer_auth(&full)
        .json(&json!({"priceUSD": "0.07"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let request_id = r.headers()["x-request-id"].to_str().unwrap().to_string();
    let r = gw
        .api(
            &full,
            Method::POST,
            "/api/keys",
            Some(json!({"role": "read"})),
        )
        .await;
    let read: Value = r.json().await.unwrap();
    let read_key = read["apiKey"].as_str().unwrap();
    let r = gw
        .admin(
            Method::PATCH,
            "/admin/orgs/acme",
            Some(json!({"suspended": true})),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        gw.api(&full, Method::DELETE, &format!("/api/routes/{id}"), None)
            .await
            .status(),
        204
    );
    // A refused change is no change: nothing recorded for it.
    assert_eq!(
        gw.api(
            read_key,
            Method::POST,
            "/api/routes",
            Some(route_body("/x"))
        )
        .await
        .status(),
        403
    );

    let log = audit(&gw, read_key, "").await;
    let entries = log["entries"].as_array().unwrap();
    let actions: Vec<&str> = entries
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "route.deleted",
            "org.updated",
            "key.created",
            "route.updated",
            "route.created",
            "org.created"
        ],
        "{log}"
    );
    let by_action = |a: &str| entries.iter().find(|e| e["action"] == a).unwrap().clone();
    let updated = by_action("route.updated");
    assert_eq!(updated["actor"], format!("key:{full_id}"));
    assert_eq!(updated["target"], id);
    assert_eq!(updated["before"]["priceUSD"], route["priceUSD"]);
    assert_eq!(updated["after"]["priceUSD"], json!(0.07));
    assert_eq!(updated["from"], "127.0.0.1");
    assert_eq!(
        updated["requestId"], request_id,
        "the id the caller was answered with"
    );
    let suspended = by_action("org.updated");
    assert_eq!(suspended["actor"], "admin");
    assert_eq!(
        (
            suspended["before"]["suspended"].as_bool(),
            suspended["after"]["suspended"].as_bool()
        ),
        (Some(false), Some(true))
    );
    let key = by_action("key.created");
    assert_eq!(key["after"]["role"], "read");
    assert!(
        !key.to_string().contains(read_key),
        "the secret is never recorded"
    );
    let deleted = by_action("route.deleted");
    assert_eq!(
        (
            deleted["before"]["path"].as_str(),
            deleted["after"].is_null()
        ),
        (Some("/weather"), true)
    );

    // Pages follow the cursor; another organisation sees none of it.
    let first = audit(&gw, &full, "?limit=4").await;
    assert_eq!(first["entries"].as_array().unwrap().len(), 4);
    let cursor = first["nextCursor"].as_str().unwrap();
    let rest = audit(&gw, &full, &format!("?limit=4&cursor={cursor}")).await;
    let rest_actions: Vec<&str> = rest["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(rest_actions, ["route.created", "org.created"]);
    assert!(rest["nextCursor"].is_null());
    let (_, other) = gw.create_org("globex", None).await;
    let theirs = audit(&gw, &other, "").await;
    let theirs: Vec<&str> = theirs["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(theirs, ["org.created"]);
    let (status, code, _) =
        error_of(gw.api(&full, Method::GET, "/api/audit?limit=0", None).await).await;
    assert_eq!((status, code.as_str()), (400, "VALIDATION_ERROR"));
}
