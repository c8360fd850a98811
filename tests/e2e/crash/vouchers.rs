//! The SIGKILL harness of voucher requests (payment channels).

use super::*;

/// Crash safety of payment channels: the binary is SIGKILLed at a random moment of a voucher
/// request (while it is admitted, forwarded, answered, charged), restarted, and the payer goes
/// on as the official client would (its next voucher; resynced by the corrective 402 when the
/// gateway did not keep what the payer thought). Over all trials: nothing charged that was not
/// served, the channel always usable afterwards, and the claim moves exactly what was charged.
#[tokio::test]
async fn sigkill_at_random_points_of_voucher_requests_charges_nothing_twice() {
    use common::channel::{self, HandPayer};
    const CH_PRICE: u128 = 1_000;
    let trials = trials();
    let (chain, mut gw, upstream, receiver, key) = acme_on_chain(&[(
        "PAYGATE_MASTER_KEY",
        "7a6b5c4d3e2f10a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5",
    )])
    .await;
    gw.create_route(
        &key,
        serde_json::json!({"path": "echo", "priceUSD": "0.001", "network": "base-sepolia",
               "targetUrl": format!("{}/echo", upstream.url),
               "schemes": ["exact", "batch-settlement"]}),
    )
    .await;
    let r = gw.get("/gateway/acme/echo").await;
    let doc = b64_json(r.headers()["payment-required"].to_str().unwrap());
    let payer = HandPayer::new(1, &doc["accepts"][1], 5);
    let send = |gw: &Gateway, payload: serde_json::Value| {
        gw.http
            .get(gw.url("/gateway/acme/echo"))
            .header("payment-signature", payer.header(payload))
    };
    // The payer's next voucher on `gw`: its own idea of the charge, then the gateway's.
    async fn next(
        gw: &Gateway,
        send: &impl Fn(&Gateway, serde_json::Value) -> reqwest::RequestBuilder,
        payer: &HandPayer,
        charged: &mut u128,
    ) -> bool {
        for _ in 0..3 {
            let Ok(r) = send(gw, payer.voucher(*charged + CH_PRICE)).send().await else {
                return false;
            };
            if r.status() == 200 {
                *charged += CH_PRICE;
                return true;
            }
            let body: serde_json::Value = r.json().await.unwrap_or_default();
            match body["accepts"][1]["extra"]["channelState"]["chargedCumulativeAmount"].as_str() {
                Some(c) => *charged = c.parse().unwrap(),
                None => return false,
            }
        }
        false
    }
    let receiver_before = chain.balance(receiver).await;
    let d = channel::deposit(&payer.config, 1, (trials as u64 + 20) * 2 * 1_000, 7);
    let r = send(&gw, payer.deposit(&d, CH_PRICE)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let mut charged = CH_PRICE;
    // Requests without a crash set the window the kills are spread over.
    let mut quickest = Duration::MAX;
    for _ in 0..3 {
        let t0 = Instant::now();
        assert!(next(&gw, &send, &payer, &mut charged).await, "{}", gw.log());
        quickest = quickest.min(t0.elapsed());
    }
    let window_ms = (quickest.as_millis() as u64 * 3 / 2).max(5);
    let mut rng = rand::thread_rng();
    let mut tally = ChannelTally::default();
    let mut served_total = upstream.hits();
    let mut charged_steps = (charged / CH_PRICE) as usize;
    for _ in 0..trials {
        let hits_before = upstream.hits();
        let payload = payer.voucher(charged + CH_PRICE);
        let first = tokio::spawn(send(&gw, payload).send());
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..=window_ms))).await;
        gw.kill();
        let outcome = match first.await.unwrap() {
            Ok(r) => r.status().as_u16().to_string(),
            Err(_) => "cut".to_string(),
        };
        if outcome == "200" {
            charged += CH_PRICE;
        }
        *tally.first.entry(outcome).or_default() += 1;
        gw.restart().await;
        if stored_charge(&gw, &key).await < charged {
            tally.answered_not_charged += 1;
        }
        // The payer goes on; then the store says what was charged.
        if !next(&gw, &send, &payer, &mut charged).await {
            tally.stuck += 1;
        }
        let now_steps = (stored_charge(&gw, &key).await / CH_PRICE) as usize;
        tally.charges_lost += charged_steps.saturating_sub(now_steps);
        let steps = now_steps.saturating_sub(charged_steps);
        let served = upstream.hits() - hits_before;
        tally.trials += 1;
        tally.served += served;
        tally.charged += steps;
        tally.served_not_charged += served.saturating_sub(steps);
        tally.charged_not_served += steps.saturating_sub(served);
        charged_steps += steps;
        served_total += served;
    }
    println!("crash tally (channels, kill window {window_ms} ms): {tally:?}");
    // The claim moves exactly what the record says was charged.
    gw.claim_channels(&key).await;
    assert_eq!(
        u128::from(chain.balance(receiver).await - receiver_before),
        charged_steps as u128 * CH_PRICE
    );
    assert!(charged_steps <= served_total);
    assert_eq!(tally.charged_not_served, 0, "{tally:?}");
    assert_eq!(tally.answered_not_charged, 0, "{tally:?}");
    assert_eq!(tally.charges_lost, 0, "{tally:?}");
    assert_eq!(tally.stuck, 0, "{tally:?}");
}
