//! Verification cost (issue 7, item 4): what the hot path spends per payment header, next to the
//! bare signature recovery it cannot avoid. `make bench` runs this and reads the estimates.
//!
//! - `payment/decode_hash_recover`: base64 + JSON decode of a v2 header, EIP-712 digest and
//!   libsecp256k1 recovery (what `verify` does before any state changes);
//! - `recover/libsecp256k1_bare`: only the recovery, on a precomputed digest (the floor);
//! - `recover/k256`: the same recovery with the pure-Rust k256 crate, for comparison;
//! - `payment/eip712_hash` and `challenge/render` for the other steps;
//! - `receipt/sign`: a signed `offer-and-receipt` receipt (EIP-712 digest and an ECDSA
//!   signature with the receipt key), what every served paid request's answer carries, channel
//!   vouchers and access-window calls included.

use alloy_primitives::B256;
use alloy_signer_local::PrivateKeySigner;
use criterion::{criterion_group, criterion_main, Criterion};
use paygate_x402::money::UsdcAmount;
use paygate_x402::network::{builtin_networks, Networks};
use paygate_x402::payment::{PaymentPayload, ProtocolVersion};
use paygate_x402::sign::payment_header;
use paygate_x402::verify::{check_signature, signing_hash, token_domain};
use paygate_x402::{Challenge, PaymentRequirements, NO_PAYMENT_ERROR};
use std::hint::black_box;

fn requirements() -> PaymentRequirements {
    let networks = Networks::from_config(&builtin_networks());
    PaymentRequirements {
        network: networks.resolve("base-sepolia").expect("network").clone(),
        amount: UsdcAmount(10_000),
        pay_to: alloy_primitives::Address::repeat_byte(9),
        resource: "http://127.0.0.1:8402/gateway/acme/echo".into(),
        description: "echo".into(),
        mime_type: String::new(),
        max_timeout_seconds: 60,
        token: Default::default(),
    }
}

fn benches(c: &mut Criterion) {
    let req = requirements();
    let signer: PrivateKeySigner =
        "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"
            .parse()
            .expect("key");
    let header = payment_header(&req, &signer, 2_000_000_000).expect("sign");
    let domain = token_domain(&req);
    let payload = PaymentPayload::decode(header.as_bytes(), ProtocolVersion::V2).expect("decode");
    let auth = payload.authorization().expect("auth");
    let digest: B256 = signing_hash(&auth, &domain);
    let sig = auth.signature.to_vec();
    let v = sig[64];
    let recid = if v >= 27 { v - 27 } else { v };

    c.bench_function("payment/decode_hash_recover", |b| {
        b.iter(|| {
            let p = PaymentPayload::decode(black_box(header.as_bytes()), ProtocolVersion::V2)
                .expect("decode");
            let a = p.authorization().expect("auth");
            let signed = check_signature(&a, &domain);
            assert_eq!(signed, paygate_x402::verify::Signed::ByKey);
            black_box(signed)
        })
    });
    c.bench_function("payment/eip712_hash", |b| {
        b.iter(|| black_box(signing_hash(black_box(&auth), &domain)))
    });
    c.bench_function("recover/libsecp256k1_bare", |b| {
        let rid = secp256k1::ecdsa::RecoveryId::try_from(i32::from(recid)).expect("recid");
        let rs =
            secp256k1::ecdsa::RecoverableSignature::from_compact(&sig[..64], rid).expect("sig");
        let msg = secp256k1::Message::from_digest(digest.0);
        b.iter(|| black_box(secp256k1::SECP256K1.recover_ecdsa(black_box(msg), &rs)))
    });
    c.bench_function("recover/k256", |b| {
        let ksig = k256::ecdsa::Signature::from_slice(&sig[..64]).expect("sig");
        let rid = k256::ecdsa::RecoveryId::from_byte(recid).expect("recid");
        b.iter(|| {
            black_box(k256::ecdsa::VerifyingKey::recover_from_prehash(
                black_box(digest.as_slice()),
                &ksig,
                rid,
            ))
        })
    });
    c.bench_function("receipt/sign", |b| {
        b.iter(|| {
            black_box(
                paygate_x402::offer_receipt::ReceiptPayload {
                    version: paygate_x402::offer_receipt::VERSION,
                    network: "eip155:84532".into(),
                    resource_url: black_box(req.resource.clone()),
                    payer: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8".into(),
                    issued_at: 2_000_000_000,
                    transaction: String::new(),
                }
                .sign(&signer),
            )
        })
    });
    c.bench_function("challenge/render", |b| {
        b.iter(|| black_box(Challenge::render(black_box(&req), NO_PAYMENT_ERROR)))
    });
}

criterion_group!(verify, benches);
criterion_main!(verify);
