//! A cluster's faults (issue 17): a node that starts before its database waits and says why;
//! PostgreSQL restarted under load costs no charge and heals by itself; a relayer account is one
//! node's alone; the node doing reconciliation SIGKILLed mid-payment while the client retries
//! on another node loses nothing and serves nothing twice.

use crate::common;

use common::chain::{address, now, Chain, PaymentSpec};
use common::cluster::*;
use common::crash::{retry_until_final, Tally};
use common::upstream::Upstream;
use common::*;
use rand::Rng;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PRICE: u64 = 10_000;
const PAYMENT_RECONCILIATION: &str = "payment-reconciliation";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_started_before_its_database_waits_and_says_why() {
    let pg = paygate_store::testing::PgCluster::start();
    pg.crash();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let url = pg.url();
    let node = tokio::spawn(async move {
        Gateway::start_on(&url, &[("PAYGATE__SERVER__LISTEN", listen.as_str())]).await
    });
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    let start = Instant::now();
    let health = loop {
        if let Ok(r) = http.get(format!("{base}/healthz")).send().await {
            break r;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the waiting node never answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(health.status(), 503);
    let body: Value = health.json().await.unwrap();
    assert_eq!(body["status"], "waiting", "{body}");
    assert!(
        body["reason"].as_str().unwrap().contains("unreachable"),
        "{body}"
    );
    // Any other request: the JSON error shape, nothing served.
    let r = http
        .get(format!("{base}/gateway/acme/echo"))
        .send()
        .await
        .unwrap();
    let (status, code, _) = error_of(r).await;
    assert_eq!((status, code.as_str()), (503, "STORE_UNAVAILABLE"));
    // The database comes up: the node serves by itself.
    pg.start_server();
    let node = node.await.unwrap();
    let r = node.get("/healthz").await;
    assert_eq!(r.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relayer_account_is_one_nodes_alone() {
    let chain = std::sync::Arc::new(Chain::start());
    let pg = paygate_store::testing::PgCluster::start();
    let env = chain.gateway_env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let _first = Gateway::start_on(&pg.url(), &env).await;
    let log = match Gateway::start_on_or_exit(&pg.url(), &env).await {
        Ok(_) => panic!("a second node started with the first node's relayer key"),
        Err(log) => log,
    };
    assert!(
        log.contains("is in use by another node") && log.contains("own relayer key"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted_under_load_charges_nothing_and_every_node_recovers() {
    let chain = std::sync::Arc::new(Chain::start());
    let pg = paygate_store::testing::PgCluster::start();
    let n = paid_nodes(&chain, &pg.url(), &[]).await;
    let upstream = Upstream::start().await;
    let (key, receiver) = echo_route(&n, &upstream).await;
    let n = Arc::new(n);

    // Unpaid load on every node for the whole test: each answer must be the 402 challenge.
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, wrong) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let load = {
        let (n, stop, sent, wrong) = (n.clone(), stop.clone(), sent.clone(), wrong.clone());
        tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let node = &n[i % 3];
                i += 1;
                let status = node.get("/gateway/acme/echo").await.status();
                sent.fetch_add(1, Ordering::Relaxed);
                if status != 402 {
                    wrong.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };

    pg.crash();
    // While it is away: paid calls are 503 on every node, nothing charged, nothing served.
    let payer = address(1);
    let before = chain.balance(payer).await;
    for (i, node) in n.iter().enumerate() {
        let spec = PaymentSpec::new(1, receiver, PRICE);
        let (status, code, body) = error_of(pay(node, &spec.v1_header()).await).await;
        assert_eq!(
            (status, code.as_str()),
            (503, "STORE_UNAVAILABLE"),
            "node {i}: {body}"
        );
    }
    assert_eq!(chain.balance(payer).await, before, "nothing charged");
    // The management API says so too (the key cannot be checked), and changes nothing.
    let r = n[1]
        .api(&key, reqwest::Method::DELETE, "/api/routes/none", None)
        .await;
    let (status, code, _) = error_of(r).await;
    assert_eq!((status, code.as_str()), (503, "STORE_UNAVAILABLE"));
    assert_eq!(upstream.hits(), 0);
    let during = sent.load(Ordering::Relaxed);

    pg.start_server();
    // Every node recovers by itself: a paid call is served on each.
    let mut recovered = Vec::new();
    for node in n.iter() {
        let start = Instant::now();
        let spec = PaymentSpec::new(2, receiver, PRICE);
        loop {
            let r = pay(node, &spec.v1_header()).await;
            if r.status() == 200 {
                break;
            }
            let (status, code, body) = error_of(r).await;
            assert_eq!(
                (status, code.as_str()),
                (503, "STORE_UNAVAILABLE"),
                "{body}"
            );
            assert!(start.elapsed() < Duration::from_secs(30), "no recovery");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        recovered.push(start.elapsed());
    }
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    assert_eq!(upstream.hits(), 3);
    assert_eq!(
        wrong.load(Ordering::Relaxed),
        0,
        "every unpaid request got its 402 ({} sent)",
        sent.load(Ordering::Relaxed)
    );
    assert!(
        during > 0,
        "the unpaid load ran while the database was away"
    );
    println!("recovered after the restart: {recovered:?}");
    for node in n.iter() {
        assert!(
            !node.log().contains(" ERROR "),
            "a database restart is not an operator's error:\n{}",
            node.log()
        );
    }
}

/// `PAYGATE_CRASH_TRIALS`, 8 by default here.
fn trials() -> usize {
    std::env::var("PAYGATE_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8)
}

/// The cluster variant of `e2e_crash`: each trial SIGKILLs the node that does payment
/// reconciliation while it serves a paid request; the client retries the same payment on
/// another node at once; the killed node is started again. The payment is served at most once,
/// money that moved has a `SETTLED` record (reconciliation on the newly elected node settles
/// what the dead node left), and nothing stays unfinished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_sigkill_of_the_elected_node_mid_payment_loses_nothing() {
    const VALIDITY_SECS: u64 = 12;
    let trials = trials();
    let chain = std::sync::Arc::new(Chain::start());
    let pg = paygate_store::testing::PgCluster::start();
    let mut n = paid_nodes(
        &chain,
        &pg.url(),
        &[
            ("PAYGATE__FACILITATOR__RECONCILE_INTERVAL_SECONDS", "1"),
            ("PAYGATE__FACILITATOR__SETTLE_TIMEOUT_SECONDS", "5"),
            ("PAYGATE__FACILITATOR__REQUEST_TIMEOUT_SECONDS", "2"),
        ],
    )
    .await;
    let upstream = Upstream::start().await;
    let (_, receiver) = echo_route(&n, &upstream).await;
    let net =
        paygate_x402::network::Networks::from_config(&paygate_x402::network::builtin_networks())
            .resolve("base-sepolia")
            .unwrap()
            .clone();
    // The kill window: a paid request's life, measured.
    let mut quickest = Duration::MAX;
    for node in &n {
        let t0 = Instant::now();
        let r = pay(node, &PaymentSpec::new(1, receiver, PRICE).v1_header()).await;
        assert_eq!(r.status(), 200);
        quickest = quickest.min(t0.elapsed());
    }
    let window_ms = (quickest.as_millis() as u64 * 3 / 2).max(10);

    let mut rng = rand::thread_rng();
    let mut tally = Tally::default();
    let mut last_valid_before = 0;
    for i in 0..trials {
        let victim = leader(&n, PAYMENT_RECONCILIATION).await;
        let other = (victim + 1 + rng.gen_range(0..2)) % 3;
        let mut spec = PaymentSpec::new(1 + i % 3, receiver, PRICE);
        spec.valid_before = now() + VALIDITY_SECS;
        last_valid_before = spec.valid_before;
        let header = spec.v1_header();
        let hits_before = upstream.hits();
        let first = {
            let req = n[victim]
                .http
                .get(n[victim].url("/gateway/acme/echo"))
                .header("X-PAYMENT", header.clone());
            tokio::spawn(async move { req.send().await.map(|r| r.status().as_u16()) })
        };
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..=window_ms))).await;
        n[victim].kill();
        let first = match first.await.unwrap() {
            Ok(status) => status.to_string(),
            Err(_) => "cut".to_string(),
        };
        *tally.first.entry(first).or_default() += 1;
        // The client retries the same payment on another node at once, until the answer is
        // final; the newly elected node reconciles what the dead one left.
        let retry = retry_until_final(
            &n[other],
            "/gateway/acme/echo",
            ("X-PAYMENT", &header),
            Duration::from_secs(45),
        )
        .await;
        *tally.retry.entry(retry).or_default() += 1;
        n[victim].restart().await;
        let served = upstream.hits() - hits_before;
        tally.judge(&chain.rpc, &net, &spec, served).await;
    }
    // Reconciliation (on whichever node leads now) finishes what is left, once every
    // authorization has expired and past the window in which a payment may still be settling.
    let wait = last_valid_before.saturating_sub(now()) + 16;
    tokio::time::sleep(Duration::from_secs(wait)).await;
    leader(&n, PAYMENT_RECONCILIATION).await;
    tally.close(n[0].store().await.as_ref()).await;
    println!("cluster crash tally (kill window {window_ms} ms, the elected node killed in every trial): {tally:?}");
    tally.assert_clean();
}

/// Payment channels' claims under SIGKILL: each trial pays a few vouchers on every node, then
/// kills the node elected to claim (`channel-claims`) at a random moment of a claim (its own
/// pass, every second, and one asked of it through the API at the same moment) and starts it
/// again. At the end one more claim finishes what is left: every channel has claimed on chain
/// exactly what it charged, the receiver got exactly the sum (no voucher claimed twice, nothing
/// served left unclaimed), and every charged voucher reached the origin once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_sigkill_of_the_elected_claimer_claims_each_charge_once() {
    use common::channel::HandPayer;
    const PRICE: u128 = 1_000;
    const PAYERS: [usize; 3] = [1, 2, 3];
    let trials = trials();
    let chain = Arc::new(Chain::start());
    let pg = paygate_store::testing::PgCluster::start();
    let mut n = paid_nodes(
        &chain,
        &pg.url(),
        &[
            (
                "PAYGATE_MASTER_KEY",
                "7a1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff1",
            ),
            ("PAYGATE__CHANNELS__LEASE_MS", "300"),
            ("PAYGATE__CHANNELS__CLAIM_MIN_BASE_UNITS", "1"),
            ("PAYGATE__CHANNELS__CLAIM_INTERVAL_SECONDS", "1"),
        ],
    )
    .await;
    let upstream = Upstream::start().await;
    let (key, receiver) = acme_route(
        &n,
        serde_json::json!({"path": "search", "priceUSD": "0.001", "network": "base-sepolia",
               "targetUrl": format!("{}/search", upstream.url),
               "schemes": ["batch-settlement"]}),
    )
    .await;
    let r = n[0].get("/gateway/acme/search").await;
    let doc = paygate_x402::b64_json(r.headers()["payment-required"].to_str().unwrap()).unwrap();
    let payers: Vec<HandPayer> = PAYERS
        .iter()
        .map(|&p| HandPayer::new(p, &doc["accepts"][0], 7))
        .collect();
    let receiver_before = chain.balance(receiver).await;
    let pay = |node: &Gateway, payer: &HandPayer, payload: Value| {
        let req = node
            .http
            .get(node.url("/gateway/acme/search"))
            .header("payment-signature", payer.header(payload));
        async move {
            let r = req.send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.text().await.unwrap_or_default())
        }
    };
    // Each payer's channel, opened with room for every step of the run.
    let mut charged = vec![PRICE; PAYERS.len()];
    for (i, payer) in payers.iter().enumerate() {
        let d =
            common::channel::deposit(&payer.config, PAYERS[i], (4 + 4 * trials as u64) * 1_000, 1);
        let (status, body) = pay(&n[i % 3], payer, payer.deposit(&d, PRICE)).await;
        assert_eq!(status, 200, "{body}");
    }
    let claim = |node: &Gateway| {
        let req = node
            .http
            .post(node.url("/api/channels/claim"))
            .bearer_auth(&key)
            .json(&serde_json::json!({}));
        tokio::spawn(async move { req.send().await.map(|r| r.status().as_u16()) })
    };
    // The kill window: a claim's duration, measured.
    let t0 = Instant::now();
    assert_eq!(claim(&n[0]).await.unwrap().unwrap(), 200);
    let window_ms = (t0.elapsed().as_millis() as u64 * 3 / 2).max(20);

    let mut rng = rand::thread_rng();
    let mut killed_during_api_claim = 0;
    for trial in 0..trials {
        for (i, payer) in payers.iter().enumerate() {
            for _ in 0..2 {
                let node = &n[rng.gen_range(0..3)];
                let next = charged[i] + PRICE;
                let (status, body) = pay(node, payer, payer.voucher(next)).await;
                assert_eq!(status, 200, "trial {trial}, payer {i}: {body}");
                charged[i] = next;
            }
        }
        let victim = leader(&n, "channel-claims").await;
        let asked = claim(&n[victim]);
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..=window_ms))).await;
        n[victim].kill();
        if asked.await.unwrap().is_err() {
            killed_during_api_claim += 1;
        }
        n[victim].restart().await;
    }
    // What is left is claimed by one more pass (a restarted node's and the claimer's passes
    // may have been cut at any point).
    let live = leader(&n, "channel-claims").await;
    n[live].claim_channels(&key).await;
    let total: u128 = charged.iter().sum();
    let list: Value = n[live]
        .api(&key, reqwest::Method::GET, "/api/channels", None)
        .await
        .json()
        .await
        .unwrap();
    let channels = list["channels"].as_array().unwrap();
    assert_eq!(channels.len(), PAYERS.len(), "{list}");
    for c in channels {
        assert_eq!(
            c["claimed"], c["charged"],
            "claimed on chain = charged: {c}"
        );
        assert_eq!(c["unclaimed"], "0", "{c}");
    }
    let charged_total: u128 = channels
        .iter()
        .map(|c| c["charged"].as_str().unwrap().parse::<u128>().unwrap())
        .sum();
    assert_eq!(charged_total, total, "every served voucher charged once");
    assert_eq!(
        u128::from(chain.balance(receiver).await - receiver_before),
        total,
        "the receiver got exactly what was charged"
    );
    assert_eq!(
        upstream.hits() as u128,
        total / PRICE,
        "every charged voucher reached the origin once"
    );
    println!(
        "claimer crash tally: {trials} trials, kill window {window_ms} ms, {killed_during_api_claim} \
         API claims cut by the kill; claimed {total} base units over {} channels, exactly what was charged",
        PAYERS.len()
    );
}
