//! The payer's way back out of an `auth-capture` hold, watched (issue 44, item 2): a gateway
//! killed while it holds a payment cannot void it; once the capture deadline has passed the
//! payer calls the escrow's `reclaim` itself. The restarted gateway's reconciliation reads the
//! escrow's `PaymentReclaimed` event and records the payment as reclaimed, with the payer's
//! transaction, which the ledger shows; nothing was captured and nothing moves twice.

use crate::common;

use common::chain::{address, Chain};
use common::windows::challenge_at;
use common::*;
use paygate_x402::auth_capture::{self, ESCROW_ADDRESS};
use serde_json::json;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const PRICE: u64 = 10_000;
const PAYER: usize = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_the_payer_reclaimed_is_recorded_as_reclaimed() {
    let chain = Chain::start();
    let mut gw = Gateway::start_with_owned(chain.gateway_env()).await;
    let (reached, origin) = common::upstream::hanging_origin().await;
    let (_, key) = gw
        .create_org("acme", Some(&address(9).to_checksum(None)))
        .await;
    gw.create_route(
        &key,
        json!({"path": "slow", "priceUSD": 0.01, "schemes": ["auth-capture"],
            "targetUrl": format!("{origin}/slow"), "network": "base-sepolia"}),
    )
    .await;
    let payer = address(PAYER);
    let before = chain.balance(payer).await;

    // Held, forwarded, and the gateway killed while the origin still works on it.
    let challenge = challenge_at(&gw, "/gateway/acme/slow").await;
    let header = b64_header(&common::escrow::signed_doc(&challenge, PAYER));
    let (http, url) = (gw.http.clone(), gw.url("/gateway/acme/slow"));
    let asked = tokio::spawn(async move {
        match http
            .get(url)
            .header("PAYMENT-SIGNATURE", header)
            .send()
            .await
        {
            Ok(r) => format!("{} {:?}", r.status(), r.headers().get("payment-required")),
            Err(e) => e.to_string(),
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while reached.load(Ordering::SeqCst) == 0 {
        if asked.is_finished() {
            panic!("answered before forwarding: {}", asked.await.unwrap());
        }
        assert!(Instant::now() < deadline, "never forwarded:\n{}", gw.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    gw.kill();
    let _cut = asked.await.unwrap();
    assert_eq!(chain.balance(ESCROW_ADDRESS).await, PRICE, "held");
    assert_eq!(chain.balance(payer).await, before - PRICE);

    // Before the capture deadline the escrow refuses the payer; after it, the hold is its own.
    let info = {
        let store = gw.store().await;
        let open = store.unfinished_payments().await.unwrap();
        assert_eq!(open.len(), 1, "{open:?}");
        let escrow = open[0].escrow.as_ref().expect("escrow terms");
        assert!(escrow.authorized_tx.is_some(), "{escrow:?}");
        escrow.terms.info(payer).expect("terms")
    };
    let reclaim = auth_capture::reclaim_call(&info);
    assert!(chain
        .send(PAYER, ESCROW_ADDRESS, reclaim.clone())
        .await
        .is_err());
    let capture_deadline = challenge["accepts"][0]["extra"]["captureDeadline"]
        .as_u64()
        .unwrap();
    chain
        .advance(capture_deadline.saturating_sub(common::chain::now()) + 60)
        .await;
    chain
        .send(PAYER, ESCROW_ADDRESS, reclaim)
        .await
        .expect("the payer reclaims");
    assert_eq!(chain.balance(payer).await, before);
    assert_eq!(chain.balance(ESCROW_ADDRESS).await, 0);

    // The restarted gateway's reconciliation sees it and says so in the ledger.
    gw.restart().await;
    let payment = gw.latest_payment_when(&key, "FAILED", 30).await;
    assert!(
        payment["failure"]
            .as_str()
            .is_some_and(|f| f.starts_with("reclaimed by the payer")),
        "{payment}"
    );
    let reclaimed = payment["escrow"]["reclaimedTransaction"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reclaimed.starts_with("0x") && reclaimed.len() == 66,
        "{payment}"
    );
    assert_eq!(payment["escrow"]["capturedUSDC"], "0.000000", "{payment}");
    assert_eq!(chain.balance(payer).await, before, "nothing moved again");
    assert_eq!(chain.balance(address(9)).await, 0);
}
