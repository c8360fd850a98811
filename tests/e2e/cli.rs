//! The organisation's CLI (`paygate routes|payments|corridors|payouts`) against the real binary
//! serving: the key comes from the environment, lists print one line per item (`--json` the
//! API's JSON), records pretty JSON, refusals exit non-zero with the error on stderr.

use crate::common;

use common::{cli, run_paygate as run, Gateway, WALLET_A, WALLET_B};
use serde_json::Value;

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
    // The listings are set the same way.
    let (ok, out, _) = cli(
        &gw,
        k,
        &[
            "routes",
            "update",
            id,
            "--public-tool",
            "true",
            "--discoverable",
            "true",
        ],
    )
    .await;
    assert!(ok, "{out}");
    let updated: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (
            updated["publicTool"].as_bool(),
            updated["discoverable"].as_bool()
        ),
        (Some(true), Some(true)),
        "{updated}"
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
    // A resource alone lists it.
    for resource in ["payments", "routes", "corridors"] {
        let (ok, out, err) = cli(&gw, k, &[resource]).await;
        assert!(ok, "{resource}: {err}");
        assert!(!out.is_empty(), "{resource}");
    }

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
        "0123456785",
        "--bank-code",
        "058",
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
    // Without --quote: quoted now, the quote shown first, then paid in the same step.
    let mut one_step: Vec<&str> = pay.to_vec();
    one_step.drain(3..5);
    let key_pos = one_step.iter().position(|a| *a == "cli-payout-1").unwrap();
    one_step[key_pos] = "cli-payout-2";
    let (ok, out, err) = cli(&gw, k, &one_step).await;
    assert!(ok, "{err}");
    assert!(err.contains("quote qt_") && err.contains("NGN"), "{err}");
    let second: Value = serde_json::from_str(&out).unwrap();
    assert_ne!(second["paymentId"], payout);
    // An amount the fees would eat is refused at the quote: nothing paid.
    one_step[key_pos] = "cli-payout-3";
    let amount_pos = one_step.iter().position(|a| *a == "50").unwrap();
    one_step[amount_pos] = "0.000001";
    let (ok, _, err) = cli(&gw, k, &one_step).await;
    assert!(!ok && err.contains("INVALID_AMOUNT"), "{err}");
    let (ok, out, _) = cli(&gw, k, &["payouts", "list", &corridor]).await;
    assert!(ok);
    assert_eq!(out.lines().count(), 3, "{out}");
    let (ok, out, _) = cli(&gw, k, &["payouts", "get", &corridor, payout]).await;
    assert!(ok);
    let got: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(got["fromAddress"], WALLET_B);

    let (ok, _, _) = cli(&gw, k, &["routes", "delete", id]).await;
    assert!(ok);
    let (ok, _, err) = cli(&gw, k, &["routes", "get", id]).await;
    assert!(!ok && err.contains("404"), "{err}");
}

#[tokio::test]
async fn an_agent_funds_a_new_wallet_and_pays_a_route_from_the_command_line() {
    let (gw, upstream, receiver) = common::gateway_with_echo(Vec::new()).await;
    let chain = gw.chain().expect("the harness's chain");
    let url = gw.url("/gateway/acme/echo");
    // A wallet nobody funded yet.
    let wallet = alloy_signer_local::PrivateKeySigner::random();
    let wallet_key = format!("0x{}", alloy_primitives::hex::encode(wallet.to_bytes()));
    let address = wallet.address().to_checksum(None);
    let payer = [("PAYGATE_PAYER_KEY", wallet_key.as_str())];

    // Unfunded: the payment is refused for want of USDC, and nothing is served.
    let (ok, _, err) = run(&payer, &["pay", &url]).await;
    assert!(!ok && err.contains("402"), "{err}");
    assert_eq!(upstream.hits(), 0);

    // Funded by address, then (no address) the wallet of PAYGATE_PAYER_KEY.
    let deployer = ("PAYGATE_DEVCHAIN_DEPLOYER_KEY", common::chain::KEYS[0]);
    let (ok, out, err) = run(
        &[deployer],
        &[
            "devchain", "fund", &address, "--amount", "2", "--rpc", &chain.rpc,
        ],
    )
    .await;
    assert!(ok, "{err}");
    let funded: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(funded["balanceUSDC"], "2", "{out}");
    let (ok, out, err) = run(
        &[deployer, payer[0]],
        &["devchain", "fund", "--amount", "3", "--rpc", &chain.rpc],
    )
    .await;
    assert!(ok, "{err}");
    let funded: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(funded["address"], address.as_str(), "{out}");
    assert_eq!(funded["balanceUSDC"], "5", "{out}");
    assert_eq!(chain.balance(wallet.address()).await, 5_000_000);

    // Dearer than the cap: not paid, nothing signed or moved.
    let (ok, _, err) = run(&payer, &["pay", &url, "--max-usd", "0.001"]).await;
    assert!(!ok && err.contains("not paid"), "{err}");
    assert_eq!(chain.balance(wallet.address()).await, 5_000_000);

    // Paid: the API's answer on stdout, what was paid and the receipt on stderr.
    let (ok, out, err) = run(&payer, &["pay", &url, "-H", "x-agent: cli"]).await;
    assert!(ok, "{err}");
    assert!(err.contains("paid $0.01 on eip155:84532"), "{err}");
    assert!(err.contains("\"success\":true"), "{err}");
    let answer: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(answer["headers"]["x-agent"], "cli", "{out}");
    assert_eq!(upstream.hits(), 1);
    assert_eq!(chain.balance(wallet.address()).await, 4_990_000);
    assert_eq!(chain.balance(receiver).await, 10_000);

    // --json: one document; the sandbox route is paid with a sandbox receipt and moves nothing.
    let (ok, out, err) = run(&payer, &["pay", &gw.url("/gateway/demo/demo"), "--json"]).await;
    assert!(ok, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["status"], 200, "{doc}");
    assert_eq!(doc["receipt"]["sandbox"], true, "{doc}");
    assert_eq!(doc["paid"]["payer"], address.as_str());
    assert_eq!(chain.balance(wallet.address()).await, 4_990_000);

    // Without a key, nothing is paid.
    let (ok, _, err) = run(&[], &["pay", &url]).await;
    assert!(!ok && err.contains("PAYGATE_PAYER_KEY"), "{err}");
}

/// A gateway on the harness's chain with organisation `acme` (receiver account 9) and an echo
/// origin: the gateway, the origin, the receiver and the organisation's API key.
async fn acme_on_chain() -> (
    Gateway,
    common::upstream::Upstream,
    alloy_primitives::Address,
    String,
) {
    let gw = Gateway::start().await;
    let upstream = common::upstream::Upstream::start().await;
    let receiver = common::chain::address(9);
    let (_, key) = gw
        .create_org("acme", Some(&receiver.to_checksum(None)))
        .await;
    (gw, upstream, receiver, key)
}

/// An `auth-capture` route paid from the command line: held in escrow, captured once served; a
/// call the origin fails is voided and costs nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_pays_an_escrowed_route_from_the_command_line() {
    use paygate_x402::auth_capture::ESCROW_ADDRESS;
    let (gw, upstream, receiver, key) = acme_on_chain().await;
    let chain = gw.chain().expect("the harness's chain");
    let route = gw
        .create_route(
            &key,
            serde_json::json!({"path": "held", "priceUSD": 0.01, "schemes": ["auth-capture"],
                "targetUrl": format!("{}/echo", upstream.url), "network": "base-sepolia"}),
        )
        .await;
    assert_eq!(route["schemes"][0], "auth-capture", "{route}");
    let payer_key = [("PAYGATE_PAYER_KEY", common::chain::KEYS[6])];
    let payer = common::chain::address(6);
    let before = chain.balance(payer).await;

    // Only `exact` asked for: the route offers none, nothing is signed.
    let url = gw.url("/gateway/acme/held");
    let (ok, _, err) = run(&payer_key, &["pay", &url, "--scheme", "exact"]).await;
    assert!(!ok && err.contains("lists none under exact"), "{err}");

    let (ok, out, err) = run(&payer_key, &["pay", &url, "--json"]).await;
    assert!(ok, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["status"], 200, "{doc}");
    assert_eq!(doc["paid"]["scheme"], "auth-capture", "{doc}");
    assert_eq!(doc["receipt"]["success"], true, "{doc}");
    assert_eq!(doc["receipt"]["amount"], "10000", "{doc}");
    assert_eq!(chain.balance(payer).await, before - 10_000);
    assert_eq!(chain.balance(receiver).await, 10_000);
    assert_eq!(chain.balance(ESCROW_ADDRESS).await, 0, "nothing left held");

    // The origin fails: the hold is voided, the payer keeps its money, the CLI says so.
    let (ok, _, err) = run(&payer_key, &["pay", &format!("{url}?upstream_status=500")]).await;
    assert!(!ok && err.contains("500"), "{err}");
    assert!(!err.contains("paid $"), "{err}");
    assert_eq!(chain.balance(payer).await, before - 10_000);
    assert_eq!(
        chain.balance(ESCROW_ADDRESS).await,
        0,
        "the hold was voided"
    );
    assert_eq!(upstream.hits(), 2);

    // A route offering both: the route's first (`exact`) unless the payer asks for escrow.
    gw.create_route(
        &key,
        serde_json::json!({"path": "both", "priceUSD": 0.01, "schemes": ["exact", "auth-capture"],
            "targetUrl": format!("{}/echo", upstream.url), "network": "base-sepolia"}),
    )
    .await;
    let both = gw.url("/gateway/acme/both");
    for (args, scheme) in [
        (vec!["pay", &both, "--json"], "exact"),
        (
            vec!["pay", &both, "--json", "--scheme", "auth-capture"],
            "auth-capture",
        ),
    ] {
        let (ok, out, err) = run(&payer_key, &args).await;
        assert!(ok, "{err}");
        let doc: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(doc["paid"]["scheme"], scheme, "{doc}");
        assert_eq!(doc["receipt"]["success"], true, "{doc}");
    }
    assert_eq!(chain.balance(payer).await, before - 30_000);
    assert_eq!(chain.balance(receiver).await, 30_000);
    assert_eq!(chain.balance(ESCROW_ADDRESS).await, 0);
}

#[tokio::test]
async fn an_operator_creates_and_changes_an_organisation_from_the_command_line() {
    let gw = Gateway::start().await;
    let url = gw.url("");
    let admin = [
        ("PAYGATE_URL", url.as_str()),
        ("PAYGATE_ADMIN_TOKEN", common::ADMIN_TOKEN),
    ];
    let (ok, out, err) = run(
        &admin,
        &[
            "admin",
            "create-org",
            "--slug",
            "globex",
            "--name",
            "Globex",
            "--receiver-wallet",
            WALLET_A,
        ],
    )
    .await;
    assert!(ok, "{err}");
    let created: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(created["name"], "Globex", "{out}");
    assert_eq!(created["receiverWallet"], WALLET_A, "{out}");
    assert!(
        created["apiKey"].as_str().unwrap().starts_with("pgk_"),
        "{out}"
    );

    // Set two fields, then clear them with their words (`default`, `none`).
    let (ok, _, err) = run(
        &admin,
        &[
            "admin",
            "update-org",
            "globex",
            "--suspended",
            "true",
            "--mcp-daily-cap-usd",
            "2.5",
            "--platform-fee-bps",
            "25",
        ],
    )
    .await;
    assert!(ok, "{err}");
    let org = globex(&gw).await;
    assert_eq!(org["suspended"], true, "{org}");
    assert_eq!(org["mcpDailyCapUSD"], serde_json::json!(2.5), "{org}");
    assert_eq!(org["platformFeeBps"], 25, "{org}");
    assert_eq!(org["receiverWallet"], WALLET_A, "{org}");
    let (ok, _, err) = run(
        &admin,
        &[
            "admin",
            "update-org",
            "globex",
            "--mcp-daily-cap-usd",
            "default",
            "--platform-fee-bps",
            "default",
            "--receiver-wallet",
            "none",
        ],
    )
    .await;
    assert!(ok, "{err}");
    let org = globex(&gw).await;
    assert_eq!(org["mcpDailyCapUSD"], Value::Null, "{org}");
    assert_eq!(org["platformFeeBps"], Value::Null, "{org}");
    assert_eq!(org["receiverWallet"], Value::Null, "{org}");
    assert_eq!(org["suspended"], true, "untouched: {org}");
    // A bad fee is refused before anything is sent.
    let (ok, _, err) = run(
        &admin,
        &[
            "admin",
            "update-org",
            "globex",
            "--platform-fee-bps",
            "many",
        ],
    )
    .await;
    assert!(
        !ok && err.contains("--platform-fee-bps takes a number"),
        "{err}"
    );
}

/// Organisation `globex` as the admin API shows it.
async fn globex(gw: &Gateway) -> Value {
    gw.admin(reqwest::Method::GET, "/admin/orgs/globex", None)
        .await
        .json()
        .await
        .unwrap()
}

/// README's escrow example, command by command as written (issue 52): an escrowed route made
/// from the command line, paid, the receiver wallet approving the refund collector, a partial
/// refund funded by the seller, and the ledger audited against the chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_escrow_example_runs_from_the_command_line() {
    let (gw, upstream, receiver, key) = acme_on_chain().await;
    let chain = gw.chain().expect("the harness's chain");
    let k = Some(key.as_str());
    let target = format!("{}/echo", upstream.url);
    let (ok, out, err) = cli(
        &gw,
        k,
        &[
            "routes",
            "create",
            "--path",
            "/held",
            "--price",
            "0.01",
            "--target",
            &target,
            "--scheme",
            "auth-capture",
            "--refund-window",
            "3600",
        ],
    )
    .await;
    assert!(ok, "{out}{err}");
    let route: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        route["schemes"],
        serde_json::json!(["auth-capture"]),
        "{route}"
    );
    assert_eq!(route["refundWindowSeconds"], 3600, "{route}");
    let payer = common::chain::address(6);
    let before = chain.balance(payer).await;
    let (ok, _, err) = common::run_paygate(
        &[("PAYGATE_PAYER_KEY", common::chain::KEYS[6])],
        &["pay", &gw.url("/gateway/acme/held")],
    )
    .await;
    assert!(ok, "{err}");
    let (ok, out, err) = common::run_paygate(
        &[("PAYGATE_RECEIVER_KEY", common::chain::KEYS[9])],
        &["devchain", "approve-refunds", "--rpc", &chain.rpc],
    )
    .await;
    assert!(ok, "{out}{err}");
    // The newest payment, perhaps not yet `SETTLED` (its capture is confirmed after the
    // answer): the refund waits for the capture.
    let (ok, out, _) = cli(&gw, k, &["payments", "list", "--json"]).await;
    assert!(ok);
    let list: Value = serde_json::from_str(&out).unwrap();
    let id = list["payments"][0]["id"].as_str().unwrap().to_string();
    let (ok, out, err) = cli(
        &gw,
        k,
        &[
            "payments",
            "refund",
            &id,
            "--amount",
            "0.004",
            "--idempotency-key",
            "refund-1",
        ],
    )
    .await;
    assert!(ok, "{out}{err}");
    assert_eq!(chain.balance(payer).await, before - 6_000);
    assert_eq!(chain.balance(receiver).await, 6_000, "the seller funded it");
    let (ok, out, err) = cli(&gw, k, &["audit", "--json"]).await;
    assert!(ok, "{out}{err}");
    let audit: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(audit["differences"], serde_json::json!([]), "{audit}");
    assert_eq!(audit["checked"], 1, "{audit}");
}
