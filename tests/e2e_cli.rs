//! The organisation's CLI (`paygate routes|payments|corridors|payouts`) against the real binary
//! serving: the key comes from the environment, lists print one line per item (`--json` the
//! API's JSON), records pretty JSON, refusals exit non-zero with the error on stderr.

mod common;

use common::{Gateway, WALLET_A, WALLET_B};
use serde_json::Value;

/// Runs `paygate ARGS` against `gw` with `key` in the environment: (success, stdout, stderr).
async fn cli(gw: &Gateway, key: Option<&str>, args: &[&str]) -> (bool, String, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_paygate"));
    cmd.env_clear().env("PAYGATE_URL", gw.url("")).args(args);
    if let Some(k) = key {
        cmd.env("PAYGATE_API_KEY", k);
    }
    let out = cmd.output().await.expect("run paygate");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_seller_manages_routes_and_payouts_from_the_command_line() {
    let gw = Gateway::start().await;
    let (_, key) = gw.create_org("acme", Some(WALLET_A)).await;
    let k = Some(key.as_str());

    let (ok, out, err) = cli(
        &gw,
        k,
        &[
            "routes",
            "create",
            "--path",
            "cli",
            "--price",
            "0.000001",
            "--target",
            "https://api.example.com/x",
            "--description",
            "from the CLI",
            "--discoverable",
        ],
    )
    .await;
    assert!(ok, "{err}");
    let route: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(route["path"], "/cli");
    assert_eq!(route["discoverable"], true);
    let id = route["id"].as_str().unwrap();
    // Printed as the API wrote it: plain decimal.
    assert!(out.contains("0.000001"), "{out}");

    let (ok, out, _) = cli(&gw, k, &["routes", "list"]).await;
    assert!(ok);
    let lines: Vec<_> = out.lines().collect();
    assert_eq!(lines[0], "id\tpath\tpriceUSD\tnetwork\tactive");
    assert_eq!(
        lines[1],
        format!("{id}\t/cli\t0.000001\tbase-sepolia\ttrue"),
        "{out}"
    );
    let (ok, out, _) = cli(&gw, k, &["routes", "list", "--json"]).await;
    assert!(ok);
    let all: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(all[0]["id"], id);

    let (ok, out, _) = cli(
        &gw,
        k,
        &[
            "routes", "update", id, "--price", "0.5", "--active", "false",
        ],
    )
    .await;
    assert!(ok, "{out}");
    let updated: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (updated["priceUSD"].as_f64(), updated["active"].as_bool()),
        (Some(0.5), Some(false))
    );

    // Refusals: the error on stderr, a non-zero exit.
    let (ok, _, err) = cli(&gw, k, &["routes", "update", id, "--price", "0"]).await;
    assert!(!ok);
    assert!(
        err.contains("400") && err.contains("VALIDATION_ERROR"),
        "{err}"
    );
    let (ok, _, err) = cli(&gw, None, &["routes", "list"]).await;
    assert!(!ok);
    assert!(err.contains("PAYGATE_API_KEY"), "{err}");
    let (ok, _, err) = cli(&gw, Some("pgk_nope_nope"), &["routes", "list"]).await;
    assert!(!ok && err.contains("401"), "{err}");

    let (ok, out, _) = cli(&gw, k, &["payments", "list", "--status", "SETTLED"]).await;
    assert!(ok);
    assert_eq!(out.lines().count(), 1, "only the header: {out}");

    // Corridors and payouts.
    let corridor = gw.active_corridor(&key, "NGN").await;
    let (ok, out, _) = cli(&gw, k, &["corridors", "list"]).await;
    assert!(ok);
    assert!(out.contains(&format!("{corridor}\tNGN\tACTIVE")), "{out}");
    let (ok, out, err) = cli(&gw, k, &["corridors", "quote", &corridor, "50"]).await;
    assert!(ok, "{err}");
    let quote: Value = serde_json::from_str(&out).unwrap();
    let quote_id = quote["quoteId"].as_str().unwrap();
    let pay = [
        "payouts",
        "pay",
        &corridor,
        "--quote",
        quote_id,
        "--amount",
        "50",
        "--from",
        WALLET_B,
        "--idempotency-key",
        "cli-payout-1",
        "--name",
        "Ada Obi",
        "--bank",
        "First Bank",
        "--account",
        "0123456789",
        "--country",
        "NG",
        "--currency",
        "NGN",
    ];
    let (ok, out, err) = cli(&gw, k, &pay).await;
    assert!(ok, "{err}");
    let paid: Value = serde_json::from_str(&out).unwrap();
    let payout = paid["paymentId"].as_str().unwrap();
    assert!(payout.starts_with("po_"));
    // The same key again: the same payout, not a second one.
    let (ok, out, _) = cli(&gw, k, &pay).await;
    assert!(ok);
    let again: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(again["paymentId"], payout);
    let (ok, out, _) = cli(&gw, k, &["payouts", "list", &corridor]).await;
    assert!(ok);
    assert_eq!(out.lines().count(), 2, "{out}");
    let (ok, out, _) = cli(&gw, k, &["payouts", "get", &corridor, payout]).await;
    assert!(ok);
    let got: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(got["fromAddress"], WALLET_B);

    let (ok, _, _) = cli(&gw, k, &["routes", "delete", id]).await;
    assert!(ok);
    let (ok, _, err) = cli(&gw, k, &["routes", "get", id]).await;
    assert!(!ok && err.contains("404"), "{err}");
}
