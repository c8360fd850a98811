//! MPP against what an origin does: an unreachable origin, an origin that fails, a usage-priced
//! route whose origin states a charge. Each is paid once in x402 (`X-PAYMENT`) and once in MPP
//! (`Authorization: Payment`) by different payers, and the two must agree: the status, what
//! the payer lost, what the seller gained, and the ledger's verdict.

use crate::common;
use crate::mpp::{challenge_at, credential_for, pay_at};
use common::chain::{address, Chain, PaymentSpec};
use common::upstream::Upstream;
use common::*;
use serde_json::{json, Value};

const PRICE: u64 = 10_000; // $0.01

/// What one paid call came to.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    status: u16,
    /// Base units the payer lost.
    paid: u64,
    /// The ledger's newest record's status and charged amount (none when nothing was recorded).
    recorded: Option<(String, String)>,
    /// Whether the origin's usage header reached the caller.
    charge_header_seen: bool,
}

struct Setup {
    chain: Chain,
    gw: Gateway,
    key: String,
    seller: alloy_primitives::Address,
    _upstream: Upstream,
}

async fn setup() -> Setup {
    let chain = Chain::start();
    let gw = Gateway::start_with_owned(chain.gateway_env()).await;
    let upstream = Upstream::start().await;
    let seller = address(9);
    let (_, key) = gw.create_org("acme", Some(&seller.to_checksum(None))).await;
    for (path, target, pricing) in [
        ("report", format!("{}/echo", upstream.url), "fixed"),
        ("metered", format!("{}/echo", upstream.url), "usage"),
        // Nothing listens on port 9 of loopback (discard, never served here).
        ("down", "http://127.0.0.1:9/echo".to_string(), "fixed"),
    ] {
        gw.create_route(
            &key,
            json!({"path": path, "priceUSD": 0.01, "targetUrl": target, "pricing": pricing,
                "network": "base-sepolia"}),
        )
        .await;
    }
    Setup {
        chain,
        gw,
        key,
        seller,
        _upstream: upstream,
    }
}

/// The newest ledger record's (status, charged amount), if it is newer than `known` records.
async fn newest(s: &Setup, known: usize) -> Option<(String, String)> {
    let list = s.gw.payments(&s.key).await;
    (list.len() > known).then(|| {
        let p = &list[0];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        (text(&p["status"]), text(&p["amountUSDC"]))
    })
}

/// `path` paid by `payer` in `protocol`.
async fn paid_call(s: &Setup, path: &str, payer: usize, protocol: &str) -> Outcome {
    let known = s.gw.payments(&s.key).await.len();
    let before = s.chain.balance(address(payer)).await;
    let (status, headers) = match protocol {
        "mpp" => {
            let route = path.split('?').next().unwrap();
            let c = challenge_at(&s.gw, route).await;
            let auth = credential_for(&c, payer, s.seller, PRICE, |_, _| {});
            let (status, headers, _) = pay_at(&s.gw, path, &auth).await;
            (status, headers)
        }
        _ => {
            let spec = PaymentSpec::new(payer, s.seller, PRICE);
            let r =
                s.gw.http
                    .get(s.gw.url(path))
                    .header("X-PAYMENT", spec.v1_header());
            let r = r.send().await.unwrap();
            (r.status().as_u16(), r.headers().clone())
        }
    };
    Outcome {
        status,
        paid: before - s.chain.balance(address(payer)).await,
        recorded: newest(s, known).await,
        charge_header_seen: headers.contains_key("x-paygate-charge"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mpp_payment_meets_a_failing_origin_and_usage_pricing_as_x402_does() {
    let s = setup().await;
    let seller_before = s.chain.balance(s.seller).await;
    let settled = Some(("SETTLED".to_string(), "0.010000".to_string()));
    // (path, payers (x402, mpp), status, paid, ledger): payers 1 to 6 hold USDC, 7 and 8 none.
    let cases = [
        // Unreachable: refused before anything is settled, nothing recorded.
        ("/gateway/acme/down", (1, 2), 503, 0, None),
        // The origin fails after the payment was settled: the payment stands.
        (
            "/gateway/acme/report?upstream_status=500",
            (3, 4),
            500,
            PRICE,
            settled.clone(),
        ),
        // A usage-priced route: `exact` (and MPP's charge) pay the price up front, whatever
        // the origin states; its header never reaches the caller.
        (
            "/gateway/acme/metered?upstream_charge=0.004",
            (5, 6),
            200,
            PRICE,
            settled.clone(),
        ),
        ("/gateway/acme/metered", (1, 2), 200, PRICE, settled),
        // A payer without the funds: the transfer fails, recorded as failed, nothing moved.
        (
            "/gateway/acme/report",
            (7, 8),
            402,
            0,
            Some(("FAILED".to_string(), "0.010000".to_string())),
        ),
    ];
    let mut moved = 0;
    for (path, (a, b), status, paid, recorded) in cases {
        let x402 = paid_call(&s, path, a, "x402").await;
        let mpp = paid_call(&s, path, b, "mpp").await;
        let want = Outcome {
            status,
            paid,
            recorded,
            charge_header_seen: false,
        };
        assert_eq!(x402, want, "x402 {path}\n{}", s.gw.log());
        assert_eq!(mpp, want, "mpp {path}\n{}", s.gw.log());
        moved += x402.paid + mpp.paid;
    }
    assert_eq!(s.chain.balance(s.seller).await, seller_before + moved);
    // Each protocol's records of the organisation tell the same story.
    let list = s.gw.payments(&s.key).await;
    let count = |p: &str| list.iter().filter(|r| r["protocol"] == p).count();
    assert_eq!(count("x402"), count("mpp"), "{list:?}");
}
