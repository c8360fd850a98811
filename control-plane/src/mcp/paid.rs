//! Public tools paid by the calling agent (`/mcp/x402/{slug}`): in x402 (the payment in
//! `_meta["x402/payment"]`, the receipt in `_meta["x402/payment-response"]`) or in MPP (the
//! `mppx` MCP client's credential in `_meta["org.paymentauth/credential"]`, the challenges
//! offered in `_meta["org.paymentauth/payment-required"]`, the receipt in
//! `_meta["org.paymentauth/receipt"]`). Either goes through paygate's own public listener, so
//! the proxy's one payment step takes it.

use super::call::{own_url, refusal, result_of, send, tool_error, unsettleable, ToolInput};
use crate::state::AppState;
use paygate_gateway::route_entry::RouteEntry;
use rmcp::model::{CallToolResult, JsonObject};
use serde_json::Value;
use std::sync::Arc;

/// `_meta` key of a tool call's payment and of its result's settlement receipt (x402's MCP
/// transport).
pub const PAYMENT_META: &str = "x402/payment";
pub const PAYMENT_RESPONSE_META: &str = "x402/payment-response";
/// `_meta` keys of MPP's MCP transport (as `mppx`'s MCP client reads and writes them).
pub const MPP_CREDENTIAL_META: &str = "org.paymentauth/credential";
const MPP_REQUIRED_META: &str = "org.paymentauth/payment-required";
const MPP_RECEIPT_META: &str = "org.paymentauth/receipt";

/// `result` offering MPP's challenge too (`header`: a `WWW-Authenticate: Payment` value), as
/// `mppx`'s MCP client reads it.
fn with_mpp_offer(mut result: CallToolResult, header: Option<&str>) -> CallToolResult {
    use paygate_gateway::payments::ways::mpp::client;
    if let Some(challenge) = header.and_then(client::challenge_object) {
        let mut meta = result.meta.take().unwrap_or_default();
        meta.insert(
            MPP_REQUIRED_META.to_string(),
            serde_json::json!({ "challenges": [challenge] }),
        );
        result.meta = Some(meta);
    }
    result
}

/// A fresh MPP challenge for `entry`, where it offers MPP.
fn mpp_challenge(state: &AppState, entry: &RouteEntry) -> Option<String> {
    let challenge = state.payments.challenge(entry)?;
    challenge
        .www_authenticate?
        .to_str()
        .ok()
        .map(str::to_string)
}

/// The route's x402 v2 `PaymentRequired` with `error`: what an unpaid or refused call of a
/// public tool answers (as `structuredContent` and as its JSON text).
fn payment_required(
    entry: &RouteEntry,
    extensions: &paygate_x402::Extensions,
    error: &str,
    receipt: Option<Value>,
) -> CallToolResult {
    let Some((req, challenge)) = &entry.payment else {
        return tool_error(error);
    };
    let mut doc =
        serde_json::to_value(req.payment_required_offered(error, extensions, &challenge.offer))
            .unwrap_or_default();
    if let Some(r) = receipt {
        doc[PAYMENT_RESPONSE_META] = r;
    }
    let mut result = tool_error(doc.to_string());
    result.structured_content = Some(doc);
    result
}

/// A public tool call (`/mcp/x402/{slug}`), paid by the caller: no payment answers the route's
/// payment requirements as a tool error; a payment (`_meta["x402/payment"]`) goes through
/// paygate's own public listener as the payment header of its version, so the proxy's one
/// payment step verifies, reserves, settles and records it (replay guard, ambiguous
/// settlement, reconciliation) before the API is called. The result carries the receipt in
/// `_meta["x402/payment-response"]`; a call whose payment was not settled has no API output.
/// `extensions` are the tool's x402 extensions (its bazaar data), shown with the requirements.
pub async fn call_paid_by_caller(
    state: &AppState,
    slug: &str,
    entry: Arc<RouteEntry>,
    extensions: &paygate_x402::Extensions,
    args: Option<JsonObject>,
    payment: Option<&Value>,
    mpp: Option<&Value>,
) -> CallToolResult {
    let input = match ToolInput::parse(args) {
        Ok(i) => i,
        Err(e) => return tool_error(e.to_string()),
    };
    let Some((req, _)) = &entry.payment else {
        return tool_error("this API cannot be paid yet: its organisation has no receiver wallet");
    };
    if let Some(refused) = unsettleable(state, req) {
        return refused;
    }
    let payment = match (payment, mpp) {
        (Some(p), _) => p,
        // An MPP credential: sent as `Authorization: Payment`, answered with MPP's receipt.
        (None, Some(credential)) => {
            return paid_in_mpp(state, slug, &entry, extensions, &input, credential).await
        }
        (None, None) => {
            let unpaid = payment_required(
                &entry,
                extensions,
                "Payment required to access this tool",
                None,
            );
            return with_mpp_offer(unpaid, mpp_challenge(state, &entry).as_deref());
        }
    };
    let version = payment.get("x402Version").and_then(Value::as_u64);
    let header = match version {
        Some(1) => "X-PAYMENT",
        Some(2) => "PAYMENT-SIGNATURE",
        _ => {
            return payment_required(
                &entry,
                extensions,
                "invalid payment: _meta[\"x402/payment\"] must be an x402 payment payload \
                 (an object with x402Version 1 or 2)",
                None,
            )
        }
    };
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(payment.to_string());
    let url = match own_url(state, slug, &entry) {
        Ok(u) => u,
        Err(e) => return tool_error(internal_text(e)),
    };
    let answer = match send(state, url, &input, (header, &encoded)).await {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(org = %slug, path = %entry.route.path, error = %e, "public MCP tool call failed");
            return tool_error(if e.is_timeout() {
                "the call timed out; it may have been charged (the same payment sent again is \
                 answered without paying twice)"
            } else {
                "paygate could not reach its own gateway"
            });
        }
    };
    let receipt = answer.receipt.as_deref().and_then(paygate_x402::b64_json);
    let network = req.network_name(paygate_x402::payment::ProtocolVersion::V2);
    if answer.status == reqwest::StatusCode::PAYMENT_REQUIRED
        || (receipt.is_none() && answer.status.is_client_error())
    {
        let text = String::from_utf8_lossy(&answer.body);
        let reason = refusal(answer.status, &text);
        let failed = serde_json::json!({
            "success": false, "errorReason": reason, "transaction": "", "network": network,
        });
        // The gateway's own v2 requirements (with its reason) when it answered some: a refused
        // channel voucher carries the channel's state there, from which the caller resyncs.
        if let Some(mut doc) = answer
            .payment_required
            .as_deref()
            .and_then(paygate_x402::b64_json)
            .filter(|d| d.get("accepts").is_some())
        {
            doc[PAYMENT_RESPONSE_META] = failed;
            let mut result = tool_error(doc.to_string());
            result.structured_content = Some(doc);
            return result;
        }
        return payment_required(&entry, extensions, &reason, Some(failed));
    }
    let mut result = result_of(&answer, state.config.mcp.max_result_bytes);
    if let Some(r) = receipt {
        let mut meta = rmcp::model::MetaObject::new();
        meta.insert(PAYMENT_RESPONSE_META.to_string(), r);
        result.meta = Some(meta);
    }
    result
}

/// A public tool call paid with an MPP credential (`mppx`'s MCP client): through paygate's own
/// listener as `Authorization: Payment`; the result carries the `Payment-Receipt` (decoded,
/// with the challenge's id) in `_meta["org.paymentauth/receipt"]`, or, refused, the problem
/// and a fresh challenge.
async fn paid_in_mpp(
    state: &AppState,
    slug: &str,
    entry: &Arc<RouteEntry>,
    extensions: &paygate_x402::Extensions,
    input: &ToolInput,
    credential: &Value,
) -> CallToolResult {
    use paygate_gateway::payments::ways::mpp::client;
    let Some(header) = client::credential_header(credential) else {
        let refused = payment_required(
            entry,
            extensions,
            "invalid payment: _meta[\"org.paymentauth/credential\"] must be an MPP credential \
             (an object with challenge and payload)",
            None,
        );
        return with_mpp_offer(refused, mpp_challenge(state, entry).as_deref());
    };
    let url = match own_url(state, slug, entry) {
        Ok(u) => u,
        Err(e) => return tool_error(internal_text(e)),
    };
    let answer = match send(state, url, input, ("authorization", &header)).await {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(org = %slug, path = %entry.route.path, error = %e, "public MCP tool call failed");
            return tool_error("paygate could not reach its own gateway");
        }
    };
    let Some(receipt) = answer.mpp_receipt.as_deref().and_then(client::receipt) else {
        let text = String::from_utf8_lossy(&answer.body).into_owned();
        let refused = tool_error(text);
        return with_mpp_offer(refused, answer.www_authenticate.as_deref());
    };
    let mut receipt = receipt;
    receipt["challengeId"] = credential["challenge"]["id"].clone();
    let mut result = result_of(&answer, state.config.mcp.max_result_bytes);
    let mut meta = rmcp::model::MetaObject::new();
    meta.insert(MPP_RECEIPT_META.to_string(), receipt);
    result.meta = Some(meta);
    result
}

fn internal_text(e: impl std::fmt::Display) -> String {
    tracing::error!(error = %e, "public MCP tool call failed");
    "internal error".to_string()
}
