//! The fuzz targets in the test suite: each target's body (`fuzz/targets.rs`, what libFuzzer
//! drives under `make fuzz`) runs on every input `fuzz/regressions/` keeps for it, on known-good
//! inputs built here (signed headers, channel payloads, sign-ins, signed webhooks), and on
//! mutations of those from a fixed seed (`PAYGATE_FUZZ_SEED` picks another), so a change that
//! breaks a target's build or one of its properties fails `make test`. Not coverage-guided: the
//! long exploration is `make fuzz`'s. An input that panics is written to
//! `target/fuzz-replay/<target>` and named in the failure.

#[path = "../../fuzz/targets.rs"]
mod targets;

use alloy_primitives::{Address, B256, U256};
use alloy_signer_local::PrivateKeySigner;
use base64::Engine;
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde_json::json;

const USDC: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";

/// Bytes the mutations insert: the JSON and header punctuation the parsers branch on.
const TOKENS: &[&[u8]] = &[
    b"\"",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"0",
    b"-1",
    b"0x",
    b"1e308",
    b"null",
    b".",
    b"/",
    b"%2F",
    b"..",
    b"=",
    b"\\u0000",
    b"18446744073709551616",
    b"\xff",
];

/// Runs `target` on its regressions, on `seeds`, and on `rounds` mutations of them.
fn replay(name: &str, target: fn(&[u8]), seeds: Vec<Vec<u8>>, rounds: usize) {
    let mut inputs = regressions(name);
    inputs.extend(seeds);
    assert!(!inputs.is_empty(), "{name}: nothing to run");
    let seed = std::env::var("PAYGATE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_u64);
    let mut rng = StdRng::seed_from_u64(seed);
    for input in &inputs {
        run(name, target, input);
    }
    for _ in 0..rounds {
        let mut input = inputs[rng.gen_range(0..inputs.len())].clone();
        for _ in 0..rng.gen_range(1..=4) {
            mutate(&mut input, &inputs, &mut rng);
        }
        run(name, target, &input);
    }
}

fn run(name: &str, target: fn(&[u8]), input: &[u8]) {
    if std::panic::catch_unwind(|| target(input)).is_err() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-replay");
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(dir.join(name), input);
        panic!(
            "fuzz target {name} panicked on an input (saved as target/fuzz-replay/{name}; add \
             it to fuzz/regressions/ once fixed): {:?}",
            String::from_utf8_lossy(&input[..input.len().min(300)])
        );
    }
}

/// One libFuzzer-like edit: flip a bit, set a byte, insert a token, drop or repeat a range, or
/// splice in part of another input.
fn mutate(input: &mut Vec<u8>, all: &[Vec<u8>], rng: &mut StdRng) {
    let len = input.len();
    let at = if len == 0 { 0 } else { rng.gen_range(0..len) };
    match rng.gen_range(0..6) {
        0 if len > 0 => input[at] ^= 1 << rng.gen_range(0..8),
        1 if len > 0 => input[at] = rng.gen(),
        2 => {
            let token = TOKENS[rng.gen_range(0..TOKENS.len())];
            input.splice(at..at, token.iter().copied());
        }
        3 if len > 0 => {
            let end = (at + rng.gen_range(1..=16)).min(len);
            input.drain(at..end);
        }
        4 if len > 0 => {
            let end = (at + rng.gen_range(1..=16)).min(len);
            let part = input[at..end].to_vec();
            input.splice(at..at, part);
        }
        _ => {
            let other = &all[rng.gen_range(0..all.len())];
            if !other.is_empty() {
                let from = rng.gen_range(0..other.len());
                let end = (from + rng.gen_range(1..=64)).min(other.len());
                input.splice(at..at, other[from..end].iter().copied());
            }
        }
    }
}

/// The inputs `fuzz/regressions/` keeps for `name` (files named `<name>-...`).
fn regressions(name: &str) -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
    let mut found: Vec<_> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{name}-"))
        })
        .map(|e| std::fs::read(e.path()).expect("a regression input"))
        .collect();
    found.sort();
    found
}

fn text(items: &[&str]) -> Vec<Vec<u8>> {
    items.iter().map(|s| s.as_bytes().to_vec()).collect()
}

fn requirement() -> paygate_x402::PaymentRequirements {
    use paygate_x402::network::{builtin_networks, Networks};
    let networks = Networks::from_config(&builtin_networks());
    paygate_x402::PaymentRequirements {
        network: networks.resolve("base-sepolia").unwrap().clone(),
        amount: paygate_x402::money::UsdcAmount(10_000),
        pay_to: Address::repeat_byte(9),
        resource: "https://pay.example.com/gateway/acme/data".into(),
        description: String::new(),
        mime_type: String::new(),
        max_timeout_seconds: 60,
        token: Default::default(),
    }
}

fn decoded(header: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(header)
        .unwrap()
}

#[test]
fn amounts() {
    let seeds = text(&[
        "100.5",
        "0.000001",
        "1e-6",
        "12.30",
        "-0",
        "0.0000005",
        "1E2",
        "99999999999999.999999",
    ]);
    replay("amounts", targets::amounts, seeds, 200_000);
}

#[test]
fn route_path() {
    let seeds = text(&[
        "/weather",
        "a//b/./c/../d",
        "/%2F/x",
        "/",
        "/v1/chat/completions",
    ]);
    replay("route_path", targets::route_path, seeds, 200_000);
}

#[test]
fn payment_header() {
    let req = requirement();
    let signer = PrivateKeySigner::random();
    let exact = paygate_x402::sign::payment_header(&req, &signer, 1_800_000_000).unwrap();
    let exact_json: serde_json::Value = serde_json::from_slice(&decoded(&exact)).unwrap();
    let v1 = json!({"x402Version": 1, "scheme": "exact", "network": "base-sepolia",
        "payload": exact_json["payload"]});
    let terms = paygate_x402::auth_capture::EscrowTerms {
        operator: Address::repeat_byte(1),
        capture_window: 900,
        refund_window: 0,
    };
    let offered = serde_json::to_value(req.to_v2_auth_capture(&terms, 1_800_000_000)).unwrap();
    let networks =
        paygate_x402::network::Networks::from_config(&paygate_x402::network::builtin_networks());
    let escrow = paygate_x402::auth_capture::client::EscrowOffer::read(&offered, &networks)
        .unwrap()
        .payment_header(&signer, 1_800_000_000)
        .unwrap();
    let from = signer.address().to_checksum(None);
    let permit2 = json!({"x402Version": 2, "resource": {"url": req.resource},
        "accepted": {"scheme": "upto", "network": "eip155:84532", "amount": "10000", "asset": USDC,
            "payTo": Address::repeat_byte(9).to_checksum(None), "maxTimeoutSeconds": 60,
            "extra": {"name": "USDC", "version": "2", "assetTransferMethod": "permit2"}},
        "payload": {"signature": format!("0x{}", "11".repeat(65)), "permit2Authorization": {
            "from": from, "permitted": {"token": USDC, "amount": "10000"},
            "spender": "0x4020633461b2895a48930Ff97eE8fCdE8E520002", "nonce": "7",
            "deadline": "1800000060", "witness": {"to": Address::repeat_byte(9).to_checksum(None),
                "validAfter": "0", "facilitator": Address::repeat_byte(1).to_checksum(None)}}},
        "extensions": {"eip2612GasSponsoring": {"info": {"from": from, "asset": USDC,
            "spender": "0x000000000022D473030F116dDEE9F6B43aC78BA3", "amount": "10000",
            "nonce": "0", "deadline": "1800000060", "signature": format!("0x{}", "22".repeat(65)),
            "version": "1"}}}});
    let mut seeds = vec![
        exact.clone().into_bytes(),
        decoded(&exact),
        v1.to_string().into_bytes(),
        escrow.into_bytes(),
        permit2.to_string().into_bytes(),
    ];
    seeds.push(
        base64::engine::general_purpose::STANDARD
            .encode(permit2.to_string())
            .into_bytes(),
    );
    replay("payment_header", targets::payment_header, seeds, 30_000);
}

#[test]
fn channel_payload() {
    let offered = json!({"scheme": "batch-settlement", "network": "eip155:84532", "asset": USDC,
        "amount": "1000", "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
        "extra": {"name": "USDC", "version": "2", "withdrawDelay": 900,
            "receiverAuthorizer": "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"}});
    let signer = PrivateKeySigner::random();
    let channel = paygate_x402::batch::client::PayerChannel::for_offer(
        signer.address(),
        &offered,
        B256::ZERO,
    )
    .expect("a channel offer");
    let deposit = channel.deposit(1_000_000, 1_000, 1_800_000_600, U256::from(1u8), &signer);
    let voucher = channel.voucher(2_000, &signer);
    let seeds = vec![
        serde_json::to_vec(&deposit).unwrap(),
        serde_json::to_vec(&voucher).unwrap(),
    ];
    replay("channel_payload", targets::channel_payload, seeds, 20_000);
}

#[test]
fn sign_in() {
    let proof = json!({"domain": "pay.example.com",
        "address": "0x976EA74026E726554dB657fA54763abd0C3a0aa9",
        "statement": "Sign in to use what you paid for", "uri": "https://pay.example.com/gateway/acme/data",
        "version": "1", "chainId": "eip155:84532", "type": "eip191", "nonce": "a1b2c3d4e5f6a7b8",
        "issuedAt": "2027-01-15T08:00:00.000Z", "expirationTime": "2027-01-15T08:05:00.000Z",
        "resources": ["https://pay.example.com/gateway/acme/data"],
        "signature": format!("0x{}", "33".repeat(65))});
    let header = base64::engine::general_purpose::STANDARD.encode(proof.to_string());
    let seeds = vec![proof.to_string().into_bytes(), header.into_bytes()];
    replay("sign_in", targets::sign_in, seeds, 40_000);
}

#[test]
fn webhook() {
    let body = json!({"id": "evt_1", "type": "payout.completed", "createdAt": 1_800_000_000,
        "data": {"payoutId": "po_1", "status": "COMPLETED", "amount": "100.50", "currency": "BRL"}})
    .to_string();
    let header =
        paygate_payouts::webhook::sign_timestamped(b"whsec_one", body.as_bytes(), 1_800_000_000);
    let mut signed = vec![u8::try_from(header.len()).unwrap_or(u8::MAX)];
    signed.extend_from_slice(header.as_bytes());
    signed.extend_from_slice(body.as_bytes());
    let cpn = json!({"notificationId": "2f1b6c1e-8a44-4c77-9d0b-5a0f3f2b9c10",
        "notificationType": "PAYMENT_STATUS_UPDATE", "payload": {"paymentId": "p_1", "status": "COMPLETED"}})
    .to_string();
    let mut cpn_input = vec![0u8];
    cpn_input.extend_from_slice(cpn.as_bytes());
    replay(
        "webhook",
        targets::webhook,
        vec![signed, cpn_input],
        100_000,
    );
}
