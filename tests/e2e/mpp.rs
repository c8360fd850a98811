//! MPP beside x402 (issue 53): every paid route's `402` carries MPP's `WWW-Authenticate:
//! Payment` challenge beside x402's forms; the official `mppx` client (library and CLI,
//! unmodified) pays it in MPP mode and, on the same route, in x402 mode; bad credentials get
//! the draft's problem details and move nothing.

use crate::common;

use alloy_primitives::{Address, B256};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use common::chain::{address, Chain, PaymentSpec, KEYS};
use common::upstream::Upstream;
use common::*;
use serde_json::{json, Value};

const PRICE: u64 = 10_000; // $0.01

struct Setup {
    chain: Chain,
    gw: Gateway,
    upstream: Upstream,
    key: String,
    seller: Address,
}

async fn setup_with(extra: &[(&str, &str)]) -> Setup {
    let chain = Chain::start();
    let mut env = chain.gateway_env();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let gw = Gateway::start_with_owned(env).await;
    let upstream = Upstream::start().await;
    let seller = address(9);
    let (_, key) = gw.create_org("acme", Some(&seller.to_checksum(None))).await;
    for (path, price) in [("report", 0.01), ("dear", 0.02)] {
        gw.create_route(
            &key,
            json!({"path": path, "priceUSD": price, "targetUrl": format!("{}/echo", upstream.url),
                "network": "base-sepolia"}),
        )
        .await;
    }
    Setup {
        chain,
        gw,
        upstream,
        key,
        seller,
    }
}

/// Creates the route `fields` describe, forwarding to the upstream's echo on the dev chain's
/// network; its JSON.
async fn echo_route(s: &Setup, mut fields: Value) -> Value {
    fields["targetUrl"] = format!("{}/echo", s.upstream.url).into();
    fields["network"] = "base-sepolia".into();
    s.gw.create_route(&s.key, fields).await
}

/// An MPP challenge's auth-params.
pub(crate) type Params = std::collections::BTreeMap<String, String>;

/// The MPP challenge's auth-params of an unpaid call to `path`.
async fn challenge(s: &Setup, path: &str) -> Params {
    challenge_at(&s.gw, path).await
}

/// [`challenge`] of `gw` (any node of a cluster).
pub(crate) async fn challenge_at(gw: &Gateway, path: &str) -> Params {
    let r = gw.http.get(gw.url(path)).send().await.unwrap();
    assert_eq!(r.status(), 402);
    assert!(
        r.headers().contains_key("payment-required"),
        "x402 beside it"
    );
    let h = r.headers()["www-authenticate"].to_str().unwrap();
    params_of(h).expect("a Payment challenge")
}

/// The auth-params of a `WWW-Authenticate: Payment` challenge (as paygate writes it).
pub(crate) fn params_of(header: &str) -> Option<Params> {
    header
        .strip_prefix("Payment ")?
        .split(", ")
        .map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_string(), v.trim_matches('"').to_string()))
        })
        .collect()
}

/// A credential for challenge `c`, signed by account `payer` as mppx signs it; `edit` changes
/// what is sent (the signed authorization's fields, then the JSON).
fn credential(
    c: &Params,
    payer: usize,
    pay_to: Address,
    edit: impl Fn(&mut PaymentSpec, &mut Value),
) -> String {
    credential_for(c, payer, pay_to, PRICE, edit)
}

/// The authorization `mppx` signs for challenge `c`: valid until the challenge expires, its
/// nonce bound to the challenge.
pub(crate) fn spec_for(c: &Params, payer: usize, pay_to: Address, amount: u64) -> PaymentSpec {
    let expires = time::OffsetDateTime::parse(
        &c["expires"],
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap()
    .unix_timestamp() as u64;
    let nonce = alloy_primitives::keccak256(format!("{}{}", c["id"], c["realm"]));
    let mut spec = PaymentSpec::new(payer, pay_to, amount);
    spec.valid_before = expires;
    spec.nonce = B256::from(nonce);
    spec
}

/// [`credential`] for a price of `amount` base units.
pub(crate) fn credential_for(
    c: &Params,
    payer: usize,
    pay_to: Address,
    amount: u64,
    edit: impl Fn(&mut PaymentSpec, &mut Value),
) -> String {
    let mut spec = spec_for(c, payer, pay_to, amount);
    let mut doc = json!({
        "challenge": {"id": c["id"], "realm": c["realm"], "method": c["method"],
            "intent": c["intent"], "request": c["request"], "expires": c["expires"]},
        "source": format!("did:pkh:eip155:84532:{}", address(payer).to_checksum(None)),
    });
    edit(&mut spec, &mut doc);
    let auth = spec.authorization();
    let payload = json!({
        "type": "authorization",
        "from": auth.from.to_checksum(None), "to": auth.to.to_checksum(None),
        "value": auth.value.to_string(), "validAfter": "0",
        "validBefore": auth.valid_before.to_string(), "nonce": format!("{:#x}", auth.nonce),
        "signature": format!("0x{}", alloy_primitives::hex::encode(&auth.signature)),
    });
    if doc.get("payload").is_none() {
        doc["payload"] = payload;
    }
    edit(&mut spec, &mut doc);
    format!("Payment {}", URL_SAFE_NO_PAD.encode(doc.to_string()))
}

async fn pay(
    s: &Setup,
    path: &str,
    authorization: &str,
) -> (u16, reqwest::header::HeaderMap, Value) {
    pay_at(&s.gw, path, authorization).await
}

/// [`pay`] at `gw` (any node of a cluster).
pub(crate) async fn pay_at(
    gw: &Gateway,
    path: &str,
    authorization: &str,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let r = gw
        .http
        .get(gw.url(path))
        .header("authorization", authorization)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let body = r.json().await.unwrap_or(Value::Null);
    (status, headers, body)
}

/// The organisation's payments, newest first.
async fn ledger(s: &Setup) -> Vec<Value> {
    s.gw.payments(&s.key).await
}

fn mppx_lib(s: &Setup, path: &str, payer: usize, protocol: &str) -> Value {
    node_json(
        "mppx_pay.cjs",
        &json!({"url": s.gw.url(path), "key": KEYS[payer], "protocol": protocol}),
    )
}

/// The `mppx` CLI, unmodified, as account `payer`: its exit status and output.
fn mppx_cli(s: &Setup, path: &str, payer: usize, protocol: &str) -> (bool, String) {
    let modules = std::env::var("PAYGATE_TEST_NODE_MODULES").expect("PAYGATE_TEST_NODE_MODULES");
    let out = std::process::Command::new("node")
        .arg(format!("{modules}/mppx/dist/bin.js"))
        .arg(s.gw.url(path))
        .args(["--protocol", protocol, "-i"])
        .env("MPPX_PRIVATE_KEY", KEYS[payer])
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("run mppx");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_mppx_client_pays_in_mpp_mode_and_in_x402_mode() {
    let s = setup_with(&[]).await;
    let path = "/gateway/acme/report";
    let c = challenge(&s, path).await;
    assert_eq!(
        (c["method"].as_str(), c["intent"].as_str()),
        ("evm", "charge")
    );
    let seller_before = s.chain.balance(s.seller).await;

    // The library, MPP mode: an `Authorization: Payment` credential, a `Payment-Receipt`.
    let before = s.chain.balance(address(2)).await;
    let out = mppx_lib(&s, path, 2, "mpp");
    assert!(
        out["offered"]
            .as_array()
            .unwrap()
            .contains(&json!("evm/charge")),
        "{out}"
    );
    assert!(
        out["offered"]
            .as_array()
            .unwrap()
            .contains(&json!("x402/exact")),
        "{out}"
    );
    let r = &out["results"][0];
    assert_eq!(r["status"], 200, "{out}\n{}", s.gw.log());
    assert_eq!(r["receipt"]["method"], "evm", "{out}");
    assert_eq!(r["receipt"]["status"], "success", "{out}");
    assert!(r["receipt"]["reference"]
        .as_str()
        .unwrap()
        .starts_with("0x"));
    assert_eq!(s.chain.balance(address(2)).await, before - PRICE);
    let recorded = &ledger(&s).await[0];
    assert_eq!(recorded["protocol"], "mpp", "{recorded}");
    assert_eq!(recorded["transaction"], r["receipt"]["reference"]);
    // The origin never sees the credential (the payment is the gateway's business).
    let echoed: Value = serde_json::from_str(r["body"].as_str().unwrap()).unwrap();
    assert!(echoed["headers"].get("authorization").is_none(), "{echoed}");

    // The same library, x402 mode, on the same route.
    let before = s.chain.balance(address(3)).await;
    let out = mppx_lib(&s, path, 3, "x402");
    let r = &out["results"][0];
    assert_eq!(r["status"], 200, "{out}");
    assert_eq!(r["receipt"]["success"], true, "{out}");
    assert_eq!(s.chain.balance(address(3)).await, before - PRICE);
    assert_eq!(ledger(&s).await[0]["protocol"], "x402");

    // The CLI, both modes.
    for (payer, protocol) in [(4, "mpp"), (5, "x402")] {
        let before = s.chain.balance(address(payer)).await;
        let (ok, text) = mppx_cli(&s, path, payer, protocol);
        assert!(ok, "mppx --protocol {protocol}: {text}");
        assert_eq!(
            s.chain.balance(address(payer)).await,
            before - PRICE,
            "{text}"
        );
    }
    // paygate's own client, `paygate pay --protocol mpp`.
    let before = s.chain.balance(address(1)).await;
    let url = s.gw.url(path);
    let (ok, out, err) = run_paygate(
        &[("PAYGATE_PAYER_KEY", KEYS[1])],
        &["pay", &url, "--protocol", "mpp", "--json"],
    )
    .await;
    assert!(ok, "{out}{err}");
    let out: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(out["receipt"]["method"], "evm", "{out}");
    assert_eq!(out["paid"]["scheme"], "mpp/evm/charge", "{out}");
    assert_eq!(s.chain.balance(address(1)).await, before - PRICE);
    assert_eq!(s.upstream.hits(), 5);
    assert_eq!(s.chain.balance(s.seller).await, seller_before + 5 * PRICE);

    // The metrics count each protocol's paid requests: the API and Prometheus.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let m = loop {
        let m = s.gw.org_metrics(&s.key, "24h").await;
        if m["metrics"]["paid"] == 5 || std::time::Instant::now() > deadline {
            break m;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(
        m["metrics"]["paidByProtocol"],
        json!({"x402": 2, "mpp": 3}),
        "{m}"
    );
    let text = s.gw.prometheus(ADMIN_TOKEN).await;
    let paid = |protocol: &str| -> u64 {
        text.lines()
            .filter(|l| l.starts_with("paygate_paid_requests_total{"))
            .filter(|l| l.contains(&format!("protocol=\"{protocol}\"")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    assert_eq!((paid("x402"), paid("mpp")), (2, 3), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_mpp_credentials_get_problem_details_and_move_nothing() {
    let s = setup_with(&[("PAYGATE__FACILITATOR__MPP_CHALLENGE_SECONDS", "10")]).await;
    let path = "/gateway/acme/report";
    let payer = address(6);
    let before = s.chain.balance(payer).await;
    let refused = |want: &'static str| {
        move |(status, headers, body): (u16, reqwest::header::HeaderMap, Value)| {
            assert_eq!(status, 402, "{want}: {body}");
            assert_eq!(
                headers["content-type"], "application/problem+json",
                "{want}"
            );
            assert!(headers["www-authenticate"]
                .to_str()
                .unwrap()
                .starts_with("Payment "));
            assert_eq!(
                body["type"],
                format!("https://paymentauth.org/problems/{want}"),
                "{body}"
            );
            assert!(
                body["requestId"].is_string() && body["code"].is_string(),
                "{body}"
            );
        }
    };
    let none = |_: &mut PaymentSpec, _: &mut Value| {};

    // A credential for another challenge: the other route's (another price).
    let dear = challenge(&s, "/gateway/acme/dear").await;
    refused("invalid-challenge")(pay(&s, path, &credential(&dear, 6, s.seller, none)).await);
    // A challenge this server did not issue (its id not bound to its fields).
    let c = challenge(&s, path).await;
    let forged = credential(&c, 6, s.seller, |_, d| {
        if d.get("payload").is_none() {
            d["challenge"]["expires"] = "2099-01-01T00:00:00Z".into();
        }
    });
    refused("invalid-challenge")(pay(&s, path, &forged).await);
    // A wrong amount, recipient or chain; a forged signature; a nonce for another challenge.
    let c = challenge(&s, path).await;
    for (why, edit) in [
        (
            "amount",
            Box::new(|p: &mut PaymentSpec, _: &mut Value| p.amount = PRICE / 2)
                as Box<dyn Fn(&mut PaymentSpec, &mut Value)>,
        ),
        (
            "recipient",
            Box::new(|p: &mut PaymentSpec, _: &mut Value| p.pay_to = address(7)),
        ),
        (
            "signer",
            Box::new(|p: &mut PaymentSpec, _: &mut Value| p.signer = Some(7)),
        ),
        (
            "nonce",
            Box::new(|p: &mut PaymentSpec, _: &mut Value| p.nonce = B256::repeat_byte(1)),
        ),
        (
            "source",
            Box::new(|_: &mut PaymentSpec, d: &mut Value| {
                d["source"] = "did:pkh:eip155:1:0x0000000000000000000000000000000000000001".into();
            }),
        ),
    ] {
        let (status, headers, body) = pay(&s, path, &credential(&c, 6, s.seller, edit)).await;
        assert_eq!(
            body["type"], "https://paymentauth.org/problems/verification-failed",
            "{why}: {body}"
        );
        refused("verification-failed")((status, headers, body));
    }
    // A malformed header, and a payload that is not an authorization.
    refused("malformed-credential")(pay(&s, path, "Payment !!!not-base64").await);
    let not_auth = credential(&c, 6, s.seller, |_, d| {
        if d.get("payload").is_some() {
            d["payload"]["type"] = "transaction".into();
        }
    });
    refused("invalid-payload")(pay(&s, path, &not_auth).await);
    assert_eq!(s.chain.balance(payer).await, before, "nothing moved");
    assert!(ledger(&s).await.is_empty(), "nothing recorded");

    // A good credential is served once; the same credential again is refused.
    let good = credential(&c, 6, s.seller, none);
    let (status, headers, _) = pay(&s, path, &good).await;
    assert_eq!(status, 200, "{}", s.gw.log());
    assert!(headers.contains_key("payment-receipt"));
    refused("invalid-challenge")(pay(&s, path, &good).await);
    assert_eq!(s.chain.balance(payer).await, before - PRICE);
    // An expired challenge (10 s, settled only with 6 s left).
    let c = challenge(&s, path).await;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    refused("payment-expired")(pay(&s, path, &credential(&c, 6, s.seller, none)).await);
    assert_eq!(s.chain.balance(payer).await, before - PRICE);
    assert_eq!(s.upstream.hits(), 1);
}

/// A paid MCP tool (`/mcp/x402/{slug}`) paid by MPP's official MCP client: `mppx`'s
/// `McpClient.wrap` around the MCP SDK's client reads the tool's challenge, pays it with a
/// credential in `_meta`, and gets the tool's result with MPP's receipt; the same route is
/// settled once, recorded as `mpp`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mppx_mcp_client_pays_a_paid_tool() {
    let s = setup_with(&[]).await;
    echo_route(
        &s,
        json!({"path": "weather", "priceUSD": 0.01, "description": "Weather by city",
            "publicTool": true}),
    )
    .await;
    let before = s.chain.balance(address(3)).await;
    let out = node_json(
        "mppx_mcp_pay.cjs",
        &json!({"url": s.gw.url("/mcp/x402/acme"), "key": KEYS[3], "tool": "weather",
            "args": {"body": {"city": "Lagos"}}}),
    );
    assert_eq!(out["isError"], false, "{out}\n{}", s.gw.log());
    assert_eq!(out["receipt"]["method"], "evm", "{out}");
    assert_eq!(out["receipt"]["status"], "success", "{out}");
    assert!(out["text"].as_str().unwrap().contains("Lagos"), "{out}");
    assert_eq!(s.chain.balance(address(3)).await, before - PRICE);
    let recorded = &ledger(&s).await[0];
    assert_eq!(recorded["protocol"], "mpp", "{recorded}");
    assert_eq!(s.upstream.hits(), 1);
}

/// MPP's discovery document for an organisation (`/discovery/{slug}/openapi.json`): its
/// discoverable routes' `charge` offers in `x-payment-info`, valid as `mppx discover validate`
/// (the official CLI, unmodified) reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_discovery_document_lists_each_routes_mpp_offer() {
    let s = setup_with(&[]).await;
    echo_route(
        &s,
        json!({"path": "listed", "priceUSD": 0.03, "discoverable": true, "description": "Listed"}),
    )
    .await;
    let url = s.gw.url("/discovery/acme/openapi.json");
    let doc: Value =
        s.gw.get("/discovery/acme/openapi.json")
            .await
            .json()
            .await
            .unwrap();
    let offer = &doc["paths"]["/listed"]["get"]["x-payment-info"]["offers"][0];
    assert_eq!(offer["amount"], "30000", "{doc}");
    assert_eq!(
        (&offer["method"], &offer["intent"]),
        (&json!("evm"), &json!("charge"))
    );
    assert!(
        doc["paths"].get("/report").is_none(),
        "not discoverable: {doc}"
    );
    assert!(doc["servers"][0]["url"]
        .as_str()
        .unwrap()
        .ends_with("/gateway/acme"));
    let modules = std::env::var("PAYGATE_TEST_NODE_MODULES").expect("PAYGATE_TEST_NODE_MODULES");
    let out = std::process::Command::new("node")
        .arg(format!("{modules}/mppx/dist/bin.js"))
        .args(["discover", "validate", &url, "--format", "json"])
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("run mppx");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("\"severity\":\"error\""), "{text}");
    let missing =
        s.gw.http
            .get(s.gw.url("/discovery/nobody/openapi.json"))
            .send()
            .await
            .unwrap();
    assert_eq!(missing.status(), 404);
}

/// A route that turned x402 off (`"protocols": ["mpp"]`): its `402` offers MPP alone (no x402
/// header, problem details as the body), an x402 payment is refused and moves nothing, MPP's
/// client pays it, and the x402 bazaar does not list it; a route that cannot answer MPP alone
/// (another scheme) is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_may_answer_mpp_alone() {
    let s = setup_with(&[]).await;
    let route = echo_route(
        &s,
        json!({"path": "only", "priceUSD": 0.01, "protocols": ["mpp"], "discoverable": true}),
    )
    .await;
    assert_eq!(route["protocols"], json!(["mpp"]), "{route}");
    let path = "/gateway/acme/only";
    let r = s.gw.http.get(s.gw.url(path)).send().await.unwrap();
    assert_eq!(r.status(), 402);
    assert!(
        !r.headers().contains_key("payment-required"),
        "no x402 form"
    );
    assert!(r.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .starts_with("Payment "));
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["type"], "https://paymentauth.org/problems/payment-required",
        "{body}"
    );

    // An x402 payment of the right amount to the right seller: refused, nothing moved.
    let before = s.chain.balance(address(2)).await;
    let accepted = json!({"scheme": "exact", "network": "eip155:84532", "amount": PRICE.to_string(),
        "payTo": s.seller.to_checksum(None), "maxTimeoutSeconds": 60,
        "asset": common::chain::USDC, "extra": {"name": "USDC", "version": "2"}});
    let header = PaymentSpec::new(2, s.seller, PRICE).v2_header(&accepted);
    let r =
        s.gw.http
            .get(s.gw.url(path))
            .header("payment-signature", header)
            .send()
            .await
            .unwrap();
    assert_eq!(r.status(), 402);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    assert_eq!(s.chain.balance(address(2)).await, before);

    // MPP pays it.
    let out = mppx_lib(&s, path, 3, "mpp");
    assert_eq!(out["results"][0]["status"], 200, "{out}");
    assert_eq!(out["offered"], json!(["evm/charge"]), "{out}");
    let listed: Value =
        s.gw.http
            .get(s.gw.url("/discovery/resources?org=acme"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert!(!listed.to_string().contains("/only"), "{listed}");

    // MPP alone on a route with channels: refused.
    let r =
        s.gw.api(
            &s.key,
            reqwest::Method::POST,
            "/api/routes",
            Some(json!({"path": "bad", "priceUSD": 0.01, "targetUrl": format!("{}/echo", s.upstream.url),
                "network": "base-sepolia", "protocols": ["mpp"],
                "schemes": ["exact", "batch-settlement"]})),
        )
        .await;
    assert_eq!(r.status(), 400);
}
