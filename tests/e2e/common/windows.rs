//! Signing in to an access window as a payer's wallet would (x402's sign-in-with-x): the SIWE
//! (EIP-4361) message written here by hand from the specification, apart from the gateway's
//! own rendering (the `siwe` crate's), and signed EIP-191.
#![allow(dead_code)] // not every test binary signs in

use super::chain::{address, signer};
use super::Gateway;
use alloy_signer::SignerSync;
use serde_json::Value;

/// The `402` of `path`, decoded (`PAYMENT-REQUIRED`).
pub async fn challenge_at(gw: &Gateway, path: &str) -> Value {
    let r = gw.get(path).await;
    assert_eq!(r.status(), 402);
    paygate_x402::b64_json(r.headers()["payment-required"].to_str().unwrap()).unwrap()
}

/// The official npm clients (@x402/fetch paying `exact`, @x402/extensions signing in,
/// `tests/interop/x402_window_pay.cjs`) calling `url` `n` times as account `payer`: the
/// script's JSON report.
pub async fn official_pay(url: &str, payer: usize, rpc: &str, n: usize) -> Value {
    let modules = std::env::var("PAYGATE_TEST_NODE_MODULES")
        .expect("PAYGATE_TEST_NODE_MODULES must name the test node_modules (run via `make test`)");
    let mut cmd = tokio::process::Command::new("node");
    cmd.env("NODE_PATH", modules)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/x402_window_pay.cjs"
        ))
        .arg(url)
        .arg(super::chain::KEYS[payer])
        .arg(rpc)
        .arg(n.to_string());
    super::run_client(cmd).await
}

/// EIP-4361's message for `f`'s fields.
pub fn siwe_text(f: &Value) -> String {
    let s = |k: &str| f[k].as_str().map(str::to_string);
    let mut m = format!(
        "{} wants you to sign in with your Ethereum account:\n{}\n\n",
        s("domain").unwrap(),
        s("address").unwrap()
    );
    if let Some(st) = s("statement") {
        m += &format!("{st}\n");
    }
    let chain = s("chainId")
        .unwrap()
        .trim_start_matches("eip155:")
        .to_string();
    m += &format!(
        "\nURI: {}\nVersion: {}\nChain ID: {chain}\nNonce: {}\nIssued At: {}",
        s("uri").unwrap(),
        s("version").unwrap(),
        s("nonce").unwrap(),
        s("issuedAt").unwrap()
    );
    for (tag, k) in [
        ("Expiration Time", "expirationTime"),
        ("Not Before", "notBefore"),
        ("Request ID", "requestId"),
    ] {
        if let Some(v) = s(k) {
            m += &format!("\n{tag}: {v}");
        }
    }
    if let Some(r) = f["resources"].as_array() {
        m += "\nResources:";
        for x in r {
            m += &format!("\n- {}", x.as_str().unwrap());
        }
    }
    m
}

/// The `SIGN-IN-WITH-X` header answering `doc`'s declaration as payer `key` (`edit` changes
/// the fields before signing; `signed_by` signs with another key).
pub fn sign_in(doc: &Value, key: usize, signed_by: usize, edit: impl FnOnce(&mut Value)) -> String {
    let decl = &doc["extensions"]["sign-in-with-x"];
    let mut f = decl["info"].clone();
    f["address"] = address(key).to_checksum(None).into();
    f["chainId"] = decl["supportedChains"][0]["chainId"].clone();
    f["type"] = "eip191".into();
    edit(&mut f);
    let sig = signer(signed_by)
        .sign_message_sync(siwe_text(&f).as_bytes())
        .unwrap();
    f["signature"] = format!("0x{}", alloy_primitives::hex::encode(sig.as_bytes())).into();
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(f.to_string())
}
