//! Edge, continued: several upstreams and their validation, and no request lost across an upgrade or a SIGTERM.

use super::*;

#[tokio::test]
async fn several_upstreams_share_the_load_and_a_killed_one_costs_no_request() {
    let (chain, gw, key, secret) = proved_gateway(&[]).await;
    let mut origins: Vec<Origin> = (0..3).map(|_| Origin::start(&secret)).collect();
    let created = gw
        .create_route(
            &key,
            serde_json::json!({"path": "lb", "priceUSD": 0.01, "network": "base-sepolia",
                "targets": [{"url": format!("{}/a", origins[0].url)},
                            {"url": format!("{}/b", origins[1].url)},
                            {"url": format!("{}/c", origins[2].url), "weight": 2}],
                "healthCheck": {"path": "/health", "intervalSeconds": 1,
                                "healthyThreshold": 1, "unhealthyThreshold": 1}}),
        )
        .await;
    let id = created["id"].as_str().unwrap().to_string();
    assert_eq!(created["targetUrl"], format!("{}/a", origins[0].url));
    assert_eq!(created["targets"][2]["weight"], 2);
    assert_eq!(created["loadBalancing"]["strategy"], "round_robin");
    let paid_call = || async {
        let r = paid_get(&gw, "lb", None).await;
        let receipts = r.headers().get_all("x-payment-response").iter().count();
        (r.status().as_u16(), receipts)
    };

    // Weighted round robin: the weight-2 target serves twice as often.
    for _ in 0..8 {
        assert_eq!(paid_call().await, (200, 1), "{}", gw.log());
    }
    let mut served = Vec::new();
    for o in &origins {
        served.push(o.stats().await["effects"].as_u64().unwrap());
    }
    assert_eq!(served, [2, 2, 4]);
    assert_eq!(healthy(&route_view(&gw, &key, &id).await), [Some(true); 3]);

    // Consistent hashing on a header: one user keeps one target.
    gw.create_route(
        &key,
        serde_json::json!({"path": "sticky", "priceUSD": 0.01, "network": "base-sepolia",
            "targets": [{"url": format!("{}/a", origins[0].url)},
                        {"url": format!("{}/c", origins[2].url)}],
            "loadBalancing": {"strategy": "hash", "header": "x-user"}}),
    )
    .await;
    for _ in 0..4 {
        assert_eq!(paid_get(&gw, "sticky", Some("alice")).await.status(), 200);
    }
    let a = origins[0].stats().await["effects"].as_u64().unwrap() - 2;
    let c = origins[2].stats().await["effects"].as_u64().unwrap() - 4;
    assert!(
        (a, c) == (4, 0) || (a, c) == (0, 4),
        "alice went to both: {a} and {c}"
    );

    // One target dies: the requests picked for it go to the next one, each paid once.
    let before = chain.balance(address(1)).await;
    drop(origins.remove(1));
    for _ in 0..6 {
        assert_eq!(paid_call().await, (200, 1), "{}", gw.log());
    }
    assert_eq!(chain.balance(address(1)).await, before - 6 * PRICE);
    // Its health checks fail: the route's view and the metrics say so.
    wait_health(&gw, &key, &id, &[Some(true), Some(false), Some(true)]).await;
    let metrics = gw.prometheus(ADMIN_TOKEN).await;
    let dead = metrics
        .lines()
        .find(|l| l.starts_with("paygate_upstream_target_healthy{") && l.contains("/b\""))
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(dead.ends_with(" 0"), "{dead}");

    // None left: 503 before any payment is taken.
    origins.clear();
    wait_health(&gw, &key, &id, &[Some(false); 3]).await;
    let before = chain.balance(address(1)).await;
    let r = paid_get(&gw, "lb", None).await;
    assert!(!r.headers().contains_key("x-payment-response"));
    let (status, code, _) = error_of(r).await;
    assert_eq!((status, code.as_str()), (503, "UPSTREAM_UNAVAILABLE"));
    assert_eq!(chain.balance(address(1)).await, before);
}

#[tokio::test]
async fn target_lists_are_validated_and_shown_in_both_forms() {
    let gw = Gateway::start().await;
    let (_, key) = gw
        .create_org("acme", Some(&address(9).to_checksum(None)))
        .await;
    let base = serde_json::json!({"path": "t", "priceUSD": 0.01, "network": "base-sepolia"});
    let with = |extra: serde_json::Value| {
        let mut b = base.clone();
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        b
    };
    for (body, field) in [
        (with(serde_json::json!({"targets": []})), "targets"),
        (
            with(serde_json::json!({"targets": [{"url": "not a url"}]})),
            "targets[0].url",
        ),
        (
            with(serde_json::json!({"targets": [{"url": "https://a.example"},
                                                 {"url": "https://a.example/other"}]})),
            "targets[1].url",
        ),
        (
            with(serde_json::json!({"targets": [{"url": "https://a.example", "weight": 0}]})),
            "targets[0].weight",
        ),
        (
            with(serde_json::json!({"targetUrl": "https://a.example",
                                    "targets": [{"url": "https://b.example"}]})),
            "targets",
        ),
        (base.clone(), "targetUrl"),
        (
            with(serde_json::json!({"targetUrl": "https://a.example",
                                    "loadBalancing": {"strategy": "hash"}})),
            "loadBalancing.header",
        ),
        (
            with(serde_json::json!({"targetUrl": "https://a.example",
                                    "healthCheck": {"path": "health"}})),
            "healthCheck.path",
        ),
    ] {
        let (status, code, err) = send_error(
            gw.http
                .post(gw.url("/api/routes"))
                .bearer_auth(&key)
                .json(&body),
        )
        .await;
        assert_eq!((status, code.as_str()), (400, "VALIDATION_ERROR"), "{body}");
        let fields: Vec<&str> = err["details"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|d| d["field"].as_str())
            .collect();
        assert!(fields.contains(&field), "{body} -> {err}");
    }
    // Nothing was created by any of them.
    let r = gw
        .api(&key, reqwest::Method::GET, "/api/routes", None)
        .await;
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap(),
        serde_json::json!([])
    );

    // The one-target form reads back as a list of one; targets replace it.
    let one = gw
        .create_route(
            &key,
            with(serde_json::json!({"targetUrl": "https://a.example/x"})),
        )
        .await;
    assert_eq!(
        one["targets"],
        serde_json::json!([{"url": "https://a.example/x", "weight": 1, "healthy": null, "ejected": null}])
    );
    let id = one["id"].as_str().unwrap();
    let r = gw
        .api(
            &key,
            reqwest::Method::PATCH,
            &format!("/api/routes/{id}"),
            Some(
                serde_json::json!({"targets": [{"url": "https://b.example/y", "weight": 3},
                                                {"url": "https://c.example/z"}],
                                    "loadBalancing": {"strategy": "hash", "header": "X-User"}}),
            ),
        )
        .await;
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["targetUrl"], "https://b.example/y");
    assert_eq!(
        v["loadBalancing"],
        serde_json::json!({"strategy": "hash", "header": "x-user"})
    );
    assert_eq!(v["targets"][0]["weight"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_request_is_lost_across_an_upgrade_with_a_new_config_nor_a_sigterm() {
    // A drain period shorter than the default, longer than the origin holds the slow call (3 s).
    let drain = ("PAYGATE__SERVER__GRACE_PERIOD_SECONDS", "4");
    let (chain, mut gw, key, secret) = proved_gateway(&[drain]).await;
    let origin = Origin::start(&secret);
    gw.create_paid_route(&key, "fast", &origin.url, false).await;
    let slow = serde_json::json!({"path": "slow", "priceUSD": 0.01, "network": "base-sepolia",
        "targetUrl": format!("{}/x/slow", origin.url)});
    gw.create_route(&key, slow).await;
    assert_eq!(max_timeout(&gw).await, 60);

    let before = chain.balance(address(1)).await;
    // Load: four clients asking for challenges, one paying, until told to stop. Their idle
    // connections live 1 s, less than the 5 s a handing-over process keeps serving (answering
    // `Connection: close`), so none is reused just as that process closes it: HTTP/1.1's own
    // keep-alive race, which a client with a longer idle timeout can meet (README).
    let client = reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (unpaid, paid) = (Arc::new(Tally::default()), Arc::new(Tally::default()));
    let mut load = Vec::new();
    for i in 0..5 {
        let (stop, unpaid, paid) = (stop.clone(), unpaid.clone(), paid.clone());
        let (http, url) = (client.clone(), gw.url("/gateway/acme/fast"));
        load.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                if i == 0 {
                    let header = PaymentSpec::new(1, address(9), PRICE).v1_header();
                    let r = http.get(&url).header("X-PAYMENT", header).send().await;
                    paid.count(r, 200);
                } else {
                    let r = http.get(&url).send().await;
                    unpaid.count(r, 402);
                }
            }
        }));
    }
    let slow_call = |gw: &Gateway| {
        let header = PaymentSpec::new(1, address(9), PRICE).v1_header();
        // Its own connection: the point is a request in flight, not a pooled connection.
        let rb = reqwest::Client::new()
            .get(gw.url("/gateway/acme/slow"))
            .header("X-PAYMENT", header);
        tokio::spawn(async move { rb.send().await.map(|r| r.status().as_u16()) })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;

    // An upgrade that also changes the configuration, with a slow paid call in flight.
    let in_flight = slow_call(&gw);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut env = chain.gateway_env();
    env.push(("PAYGATE_MASTER_KEY".into(), MASTER_KEY.into()));
    env.push(("PAYGATE__X402__MAX_TIMEOUT_SECONDS".into(), "90".into()));
    env.push((drain.0.into(), drain.1.into()));
    gw.set_env(env);
    gw.upgrade().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::SeqCst);
    for l in load {
        l.await.unwrap();
    }
    assert_eq!(in_flight.await.unwrap().unwrap(), 200, "{}", gw.log());
    let (unpaid, paid) = (unpaid.counts(), paid.counts());
    eprintln!("upgrade under load: unpaid {unpaid:?}, paid {paid:?} (ok, dropped, wrong)");
    // No wrong answer, and no money moved for a request that got none: every payment taken
    // belongs to an answered paid call (the loop's and the slow one).
    assert_eq!((unpaid.2, paid.2), (0, 0), "{}", gw.log());
    assert!(
        unpaid.0 > 100 && paid.0 > 3,
        "unpaid {unpaid:?}, paid {paid:?}"
    );
    let spent = (before - chain.balance(address(1)).await) / PRICE;
    if spent != paid.0 as u64 + 1 {
        let log = gw.log();
        let odd: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("status=0") || l.contains("ERROR") || l.contains("WARN"))
            .collect();
        panic!(
            "payments taken {spent} vs answered {paid:?}:\n{}",
            odd.join("\n")
        );
    }
    // Connections the old process had accepted but not yet read a request from when it shut
    // down are closed by Pingora (README "Reloads and upgrades"): a handful at most.
    assert!(unpaid.1 + paid.1 <= 8, "unpaid {unpaid:?}, paid {paid:?}");
    // The new process serves with the new configuration.
    assert_eq!(max_timeout(&gw).await, 90);

    // SIGTERM: the slow paid call in flight finishes before the process exits.
    let in_flight = slow_call(&gw);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(tokio::task::block_in_place(|| gw.stop()), "{}", gw.log());
    assert_eq!(in_flight.await.unwrap().unwrap(), 200);
}
