//! `auth-capture` payments as the official npm client signs them (@x402/evm's
//! `AuthCaptureEvmScheme`), for tests that send the header themselves.

use super::chain::KEYS;
use super::node_json;
use serde_json::{json, Value};

/// The payment document (before base64) the client sends for the first requirement of
/// `challenge`, signed by account `payer`.
pub fn signed_doc(challenge: &Value, payer: usize) -> Value {
    let accepted = challenge["accepts"][0].clone();
    let signed = node_json(
        "x402_permit2_sign.cjs",
        &json!({"scheme": "auth-capture", "key": KEYS[payer], "requirements": accepted}),
    );
    json!({"x402Version": 2, "resource": challenge["resource"],
        "accepted": accepted, "payload": signed["payload"]})
}
