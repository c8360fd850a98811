//! The web console in a real browser (issue 19): headless Chromium from Debian's packages,
//! driven by Selenium (`tests/interop/console_browser.py`) against the real binary on anvil,
//! with the official x402 Python client paying, `paygate pay --channel` paying over a payment
//! channel, the official npm client paying an escrowed route whose payment the seller refunds
//! from its page, and the sandbox payout provider settling.
//! Screenshots of each page land in `target/console/` (the README shows two of them).

use crate::common;

use common::chain::{address, Chain, KEYS};
use common::upstream::Upstream;
use common::*;
use serde_json::Value;

#[tokio::test]
async fn a_seller_works_the_console_from_sign_in_to_a_settled_payout() {
    let chain = Chain::start();
    let mut env = chain.gateway_env();
    env.extend([
        (
            "PAYGATE_WEBHOOK_SECRETS".to_string(),
            "console-test-secret".to_string(),
        ),
        (
            "PAYGATE__PAYOUT__SANDBOX__WEBHOOK_DELAY_MS".to_string(),
            "100".to_string(),
        ),
        // Payment channels need a receiver authorizer (derived from the master key).
        (
            "PAYGATE_MASTER_KEY".to_string(),
            "0f1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff1".to_string(),
        ),
        // Payouts through the CPN adapter and its simulator (RFIs answered in the console),
        // funded on chain from the payout wallet, the simulator paid at account 8.
        ("PAYGATE__PAYOUT__PROVIDER".to_string(), "cpn".to_string()),
        (
            "PAYGATE__PAYOUT__FUNDING_NETWORK".to_string(),
            "base-sepolia".to_string(),
        ),
        (
            "PAYGATE__PAYOUT__SANDBOX__FUNDING_ADDRESS".to_string(),
            address(8).to_checksum(None),
        ),
    ]);
    let gw = Gateway::start_with_owned(env).await;
    let upstream = Upstream::start().await;
    let (_, key) = gw
        .create_org("acme", Some(&address(9).to_checksum(None)))
        .await;
    // 100 USDC in the organisation's payout wallet (from payer account 1).
    let r = gw
        .api(&key, reqwest::Method::GET, "/api/payout-wallet", None)
        .await;
    let w: Value = r.json().await.unwrap();
    let wallet = w["address"].as_str().unwrap().parse().unwrap();
    chain.send_usdc(1, wallet, 100_000_000).await;
    // The seller's wallet (the receiver, account 9) funds the escrowed payment's refund.
    crate::common::escrow::approve_refunds(&chain, 9).await;
    let shots = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/console");
    std::fs::create_dir_all(&shots).expect("screenshot directory");
    let python = std::env::var("PAYGATE_TEST_PYTHON").expect("PAYGATE_TEST_PYTHON (make test)");
    let interop = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop");
    let out = tokio::process::Command::new(&python)
        .arg(format!("{interop}/console_browser.py"))
        .env("BASE", &gw.base)
        .env("ORG_KEY", &key)
        .env("ADMIN_TOKEN", ADMIN_TOKEN)
        .env("UPSTREAM", &upstream.url)
        .env("PAYER_KEY", KEYS[2])
        .env("PAY_SCRIPT", format!("{interop}/x402_python_pay.py"))
        .env("PAYGATE_BIN", env!("CARGO_BIN_EXE_paygate"))
        .env("SCREENSHOTS", &shots)
        .env("RPC", &chain.rpc)
        .env("NODE_PAYER_KEY", KEYS[3])
        .env("NODE_PAY_SCRIPT", format!("{interop}/x402_permit2_pay.cjs"))
        .env(
            "NODE_PATH",
            std::env::var("PAYGATE_TEST_NODE_MODULES").expect("PAYGATE_TEST_NODE_MODULES"),
        )
        .output()
        .await
        .expect("run the browser test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "browser test failed:\n{stdout}\n{}\ngateway log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        gw.log()
    );
    let seen: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    println!("{seen}");
    assert_eq!(
        upstream.hits(),
        8,
        "the upstream served the paid call, the two channel calls, the windowed route's paid call \
         and the escrowed call, and received the webhook endpoint's route.changed delivery, its \
         replay and the escrowed route's route.changed"
    );
    assert_eq!(seen["webhook"], "DELIVERED");
    // Revenue is shown net of refunds: the overview's refunded tile counts the console's refund.
    assert_eq!(seen["refundedTile"], "0.004000 USDC", "{seen}");
    // The ledger check compared the payments made above (the paid call, the channel's, the
    // windowed route's and the escrowed one, captured and partly refunded) with the chain.
    let check = seen["ledgerCheck"].as_str().unwrap_or_default();
    assert!(
        check.starts_with("The ledger and the chain agree on all")
            && !check.contains(" 0 payments"),
        "{seen}"
    );
    for page in [
        "overview-empty",
        "route",
        "payments",
        "webhooks",
        "payment",
        "overview",
        "overview-narrow",
        "operator",
        "corridor-quote",
        "payout",
        "channels",
        "windows",
        "payment-refund",
        "keys",
        "keys-read-only",
        "audit",
        "ledger-check",
    ] {
        let png = shots.join(format!("{page}.png"));
        let len = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
        assert!(len > 10_000, "{} is missing or blank", png.display());
    }
    // The console never put a key in a URL: the access log has no key.
    assert!(!gw.log().contains(&key));
}
