//! MCP, continued: the spending cap, tool names and organisation isolation, suspension.

use super::*;

#[tokio::test]
async fn spending_cap_and_missing_wallet_are_tool_errors_before_signing() {
    let s = setup(6, &[]).await;
    // $0.015 a day: one $0.01 call fits, the second does not.
    let r =
        s.gw.admin(
            Method::PATCH,
            "/admin/orgs/acme",
            Some(json!({"mcpDailyCapUSD": "0.015"})),
        )
        .await;
    let org: Value = r.json().await.unwrap();
    assert_eq!(org["mcpDailyCapUSD"], json!(0.015));
    for bad in [
        json!({"mcpDailyCapUSD": "-1"}),
        json!({"mcpDailyCapUSD": "0.0000001"}),
        json!({"mcpDailyCapUSD": true}),
    ] {
        let r =
            s.gw.admin(Method::PATCH, "/admin/orgs/acme", Some(bad.clone()))
                .await;
        assert_eq!(error_of(r).await.0, 400, "{bad}");
    }
    let payer = address(6);
    let before = s.chain.balance(payer).await;
    let client = rust_client(&s.gw, &s.key).await;
    let r = call(&client, "echo", json!({})).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let r = call(&client, "echo", json!({})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(text_of(&r).contains("daily cap"), "{}", text_of(&r));
    assert_eq!(s.chain.balance(payer).await, before - PRICE);
    assert_eq!(s.upstream.hits(), 1);

    // Without a payer wallet the call is refused the same way.
    let r =
        s.gw.admin(Method::DELETE, "/admin/orgs/acme/payer-wallet", None)
            .await;
    assert!(r.status().is_success());
    s.gw.admin(
        Method::PATCH,
        "/admin/orgs/acme",
        Some(json!({"mcpDailyCapUSD": null})),
    )
    .await;
    let r = call(&client, "echo", json!({})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(text_of(&r).contains("no payer wallet"), "{}", text_of(&r));

    // A payer without USDC: the payment is refused on-chain simulation, nothing is charged.
    let poor = "0x1111111111111111111111111111111111111111111111111111111111111111";
    let r =
        s.gw.admin(
            Method::PUT,
            "/admin/orgs/acme/payer-wallet",
            Some(json!({"privateKey": poor})),
        )
        .await;
    assert_eq!(r.status(), 200);
    let r = call(&client, "echo", json!({})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(text_of(&r).contains("PAYMENT_REJECTED"), "{}", text_of(&r));
    assert_eq!(s.upstream.hits(), 1);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn tool_names_are_valid_and_unique_and_orgs_are_isolated() {
    let gw = Gateway::start().await;
    let (_, acme) = gw.create_org("acme", Some(WALLET_A)).await;
    let (_, globex) = gw.create_org("globex", Some(WALLET_B)).await;
    for p in [
        "/a/b",
        "/a_b",
        "/a.b",
        "/v1/chat.completions",
        &format!("/{}", "long-".repeat(20)),
    ] {
        gw.create_route(&acme, route_body(p)).await;
    }
    gw.create_route(&globex, route_body("/secret")).await;
    let client = rust_client(&gw, &acme).await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    assert_eq!(names.len(), 5, "{names:?}");
    let unique: std::collections::HashSet<_> = names.iter().collect();
    assert_eq!(unique.len(), 5, "{names:?}");
    for n in &names {
        assert!(n.len() <= 64 && !n.is_empty(), "{n}");
        assert!(
            n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            "{n}"
        );
        assert!(!n.contains("secret"));
    }
    assert!(
        names.contains(&"v1_chat_completions".to_string()),
        "{names:?}"
    );
    // globex sees only its own route, under the same server.
    let other = rust_client(&gw, &globex).await;
    let tools = other.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0].name, "secret");
    // And cannot call acme's tools.
    let params = CallToolRequestParams::new(names[0].clone());
    assert!(other.call_tool(params).await.is_err());
    client.cancel().await.unwrap();
    other.cancel().await.unwrap();
}

/// Suspension (README, "Suspension"): the tools disappear (`tools/list_changed` is sent), a
/// call is a tool error, the facilitator API and new corridor quotes and payouts are refused
/// with `403 ORG_SUSPENDED`; reading and fixing the configuration keep working; lifting the
/// suspension brings everything back.
#[tokio::test]
async fn suspension_hides_tools_and_refuses_what_sells_or_pays_but_not_reading() {
    let s = setup(6, &[]).await;
    let corridor = s.gw.active_corridor(&s.key, "BRL").await;
    // A payout accepted before the suspension: its key's replay answers as before.
    let q: Value =
        s.gw.api(
            &s.key,
            Method::GET,
            &format!("/corridors/{corridor}/quote?amount=10"),
            None,
        )
        .await
        .json()
        .await
        .unwrap();
    let payout = json!({
        "quoteId": q["quoteId"], "fromAddress": WALLET_B, "amountUSDC": q["amount"],
        "beneficiary": {"name": "Ana Souza", "bankName": "Banco Teste",
                        "accountNumber": "0001-23456-7", "country": "BR", "currency": "BRL"}});
    let first =
        s.gw.pay_corridor(&s.key, &corridor, "before", &payout)
            .await;
    assert_eq!(first.status(), 202);
    let first: Value = first.json().await.unwrap();
    let watcher = Watcher::default();
    let changed = watcher.changed.clone();
    let client = rust_client_with(&s.gw, &s.key, watcher).await.unwrap();
    assert_eq!(client.list_all_tools().await.unwrap().len(), 1);

    let suspend = |on: bool| {
        s.gw.admin(
            Method::PATCH,
            "/admin/orgs/acme",
            Some(json!({ "suspended": on })),
        )
    };
    assert_eq!(suspend(true).await.status(), 200);
    tokio::time::timeout(Duration::from_secs(10), changed.notified())
        .await
        .expect("tools/list_changed on suspension");
    assert!(client.list_all_tools().await.unwrap().is_empty());
    let r = call(&client, "echo", json!({})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(text_of(&r).contains("ORG_SUSPENDED"), "{}", text_of(&r));

    let refused = [
        (
            Method::POST,
            "/corridors",
            Some(json!({"destCurrency": "MXN"})),
        ),
        (
            Method::GET,
            &*format!("/corridors/{corridor}/quote?amount=10"),
            None,
        ),
        (Method::POST, "/facilitator/verify", Some(json!({}))),
        (Method::POST, "/facilitator/settle", Some(json!({}))),
    ];
    for (method, path, body) in refused {
        let r = s.gw.api(&s.key, method, path, body).await;
        let (status, code, _) = error_of(r).await;
        assert_eq!((status, code.as_str()), (403, "ORG_SUSPENDED"), "{path}");
    }
    let r =
        s.gw.pay_corridor(&s.key, &corridor, "k1", &json!({"quoteId": "qt_x"}))
            .await;
    let (status, code, _) = error_of(r).await;
    assert_eq!((status, code.as_str()), (403, "ORG_SUSPENDED"));
    let replay =
        s.gw.pay_corridor(&s.key, &corridor, "before", &payout)
            .await;
    assert_eq!(replay.status(), 202);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.json::<Value>().await.unwrap(), first);
    for path in [
        "/api/routes",
        "/api/payments",
        "/api/usage",
        "/corridors",
        "/api/keys",
    ] {
        let r = s.gw.api(&s.key, Method::GET, path, None).await;
        assert_eq!(r.status(), 200, "{path}");
    }
    assert_eq!(s.gw.get("/gateway/acme/echo").await.status(), 403);

    assert_eq!(suspend(false).await.status(), 200);
    tokio::time::timeout(Duration::from_secs(10), changed.notified())
        .await
        .expect("tools/list_changed when lifted");
    assert_eq!(client.list_all_tools().await.unwrap().len(), 1);
    let r =
        s.gw.api(
            &s.key,
            Method::GET,
            &format!("/corridors/{corridor}/quote?amount=10"),
            None,
        )
        .await;
    assert_eq!(r.status(), 200);
    client.cancel().await.unwrap();
}
