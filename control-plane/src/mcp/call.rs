//! A paid tool call: check the daily spending cap, sign an x402 payment with the organisation's
//! payer wallet, send the request through paygate's own public listener (so plan limits,
//! metrics, settlement and payment records apply as for any agent) and turn the answer into a
//! tool result. Payment headers and chain details never reach the result.

use crate::state::AppState;
use alloy_signer_local::PrivateKeySigner;
use paygate_domain::model::Org;
use paygate_gateway::route_table::RouteEntry;
use paygate_store::SpendReservation;
use paygate_x402::money::UsdcAmount;
use paygate_x402::sign::payment_header;
use paygate_x402::PaymentRequirements;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use rmcp::ErrorData as McpError;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// What the caller asked for, validated.
#[derive(Debug, PartialEq)]
pub(super) struct ToolInput {
    method: reqwest::Method,
    query: Vec<(String, String)>,
    body: Option<Value>,
}

/// Why a tool call's arguments are refused (said to the assistant as a tool error).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum InputError {
    #[error("method {0:?} is not one of {methods}", methods = super::tools::TOOL_METHODS.join(", "))]
    Method(String),
    #[error("method must be a string")]
    MethodType,
    #[error("query.{0} must be a string")]
    QueryValue(String),
    #[error("query must be an object of strings")]
    QueryType,
    #[error("unknown argument {0:?}: the tool takes method, query and body")]
    Unknown(String),
    #[error("a body needs a method other than GET")]
    BodyWithGet,
}

impl ToolInput {
    pub(super) fn parse(args: Option<JsonObject>) -> Result<Self, InputError> {
        let mut args = args.unwrap_or_default();
        let body = args.remove("body");
        let method = match args.remove("method") {
            None | Some(Value::Null) => None,
            Some(Value::String(m)) => {
                let upper = m.to_ascii_uppercase();
                if !super::tools::TOOL_METHODS.contains(&upper.as_str()) {
                    return Err(InputError::Method(m));
                }
                Some(
                    reqwest::Method::from_bytes(upper.as_bytes())
                        .map_err(|_| InputError::Method(m))?,
                )
            }
            Some(_) => return Err(InputError::MethodType),
        };
        let query = match args.remove("query") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(q)) => {
                let mut pairs = Vec::with_capacity(q.len());
                for (k, v) in q {
                    match v {
                        Value::String(s) => pairs.push((k, s)),
                        _ => return Err(InputError::QueryValue(k)),
                    }
                }
                pairs
            }
            Some(_) => return Err(InputError::QueryType),
        };
        if let Some(k) = args.keys().next() {
            return Err(InputError::Unknown(k.clone()));
        }
        let method = method.unwrap_or(if body.is_some() {
            reqwest::Method::POST
        } else {
            reqwest::Method::GET
        });
        if body.is_some() && method == reqwest::Method::GET {
            return Err(InputError::BodyWithGet);
        }
        Ok(Self {
            method,
            query,
            body,
        })
    }
}

pub(crate) fn tool_error(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

fn internal(e: impl std::fmt::Display) -> McpError {
    tracing::error!(error = %e, "MCP tool call failed");
    McpError::internal_error("internal error", None)
}

/// Why the payer wallet cannot sign (said to the assistant as a tool error).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
enum PayerError {
    #[error(
        "this organisation has no payer wallet for MCP tool calls; \
         the operator sets one with PUT /admin/orgs/{{slug}}/payer-wallet"
    )]
    None,
    #[error("paygate cannot open the payer wallet: its master key is not set")]
    NoMasterKey,
    #[error("paygate cannot open the payer wallet (master key changed?)")]
    Sealed,
    #[error("the stored payer wallet is unreadable")]
    Unreadable,
}

/// The payer wallet's signer.
fn payer(state: &AppState, org: &Org) -> Result<PrivateKeySigner, PayerError> {
    let sealed = org.payer_key.as_ref().ok_or(PayerError::None)?;
    let env = &state.config.orgs.master_key_env;
    let master = match paygate_domain::secrets::MasterKey::from_env(env) {
        Some(Ok(m)) => m,
        _ => return Err(PayerError::NoMasterKey),
    };
    let key = master
        .open(sealed, &org.id)
        .map_err(|_| PayerError::Sealed)?;
    let text = String::from_utf8(key).map_err(|_| PayerError::Unreadable)?;
    text.trim()
        .parse::<PrivateKeySigner>()
        .map_err(|_| PayerError::Unreadable)
}

fn usd(units: u64) -> String {
    UsdcAmount(units).to_decimal().to_string()
}

/// The gateway's answer, read up to the result limit.
pub(super) struct Answer {
    pub(super) status: reqwest::StatusCode,
    /// The settlement receipt (base64 JSON) when one came back: the payment was taken.
    pub(super) receipt: Option<String>,
    /// The gateway's `PAYMENT-REQUIRED` (base64 JSON) on a refused payment.
    pub(super) payment_required: Option<String>,
    /// MPP's `Payment-Receipt` (base64url JSON) when an MPP credential was taken.
    pub(super) mpp_receipt: Option<String>,
    /// MPP's fresh challenge (`WWW-Authenticate: Payment`) on a refused credential.
    pub(super) www_authenticate: Option<String>,
    pub(super) content_type: String,
    pub(super) body: Vec<u8>,
    pub(super) truncated: bool,
}

impl Answer {
    fn settled(&self) -> bool {
        self.receipt.is_some()
    }

    /// Whether the payment may have been taken (keep the spend counted).
    fn maybe_charged(&self) -> bool {
        self.settled() || error_code(&self.body).as_deref() == Some("SETTLEMENT_PENDING")
    }
}

fn error_code(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    v.get("code")?.as_str().map(str::to_string)
}

pub(super) async fn send(
    state: &AppState,
    mut url: url::Url,
    input: &ToolInput,
    (payment_header, payment): (&str, &str),
) -> Result<Answer, reqwest::Error> {
    let cfg = &state.config.mcp;
    if !input.query.is_empty() {
        url.query_pairs_mut().extend_pairs(&input.query);
    }
    let mut req = state
        .mcp
        .http()
        .request(input.method.clone(), url)
        .timeout(Duration::from_secs(cfg.tool_timeout_seconds))
        .header(payment_header, payment)
        .header(reqwest::header::USER_AGENT, "paygate-mcp");
    match &input.body {
        Some(Value::String(s)) => {
            req = req
                .header(reqwest::header::CONTENT_TYPE, "text/plain; charset=utf-8")
                .body(s.clone());
        }
        Some(v) => {
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(v.to_string());
        }
        None => {}
    }
    let mut resp = req.send().await?;
    let status = resp.status();
    let receipt = ["payment-response", "x-payment-response"]
        .iter()
        .find_map(|h| resp.headers().get(*h))
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let payment_required = header("payment-required");
    let mpp_receipt = header("payment-receipt");
    let www_authenticate = header("www-authenticate");
    let content_type = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let mut body = Vec::new();
    let mut truncated = false;
    while let Some(chunk) = resp.chunk().await? {
        let room = cfg.max_result_bytes.saturating_sub(body.len());
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            truncated = true;
            break;
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Answer {
        status,
        receipt,
        payment_required,
        mpp_receipt,
        www_authenticate,
        content_type,
        body,
        truncated,
    })
}

/// The tool result for an answer: the body as text on success, a clear message otherwise.
pub(super) fn result_of(a: &Answer, limit: usize) -> CallToolResult {
    let text = match std::str::from_utf8(&a.body) {
        Ok(t) => t.to_string(),
        // Cut inside a UTF-8 sequence, or not text at all.
        Err(e) if a.truncated && e.error_len().is_none() => {
            String::from_utf8_lossy(&a.body[..e.valid_up_to()]).into_owned()
        }
        Err(_) => {
            return if a.status.is_success() {
                CallToolResult::success(vec![ContentBlock::text(format!(
                    "The API answered {} bytes of binary data, which cannot be shown as text.",
                    a.body.len()
                ))])
            } else {
                tool_error(format!("The API answered {}.", a.status))
            };
        }
    };
    if a.status.is_success() {
        // The structured result (the tool's outputSchema) and the text beside it.
        let body =
            serde_json::from_str::<Value>(&text).unwrap_or_else(|_| Value::String(text.clone()));
        let structured = serde_json::json!({
            "status": a.status.as_u16(), "contentType": a.content_type, "body": body,
            "truncated": a.truncated,
        });
        let mut text = text;
        if a.truncated {
            text.push_str(&format!("\n[paygate: answer cut at {limit} bytes]"));
        }
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(structured);
        return result;
    }
    tool_error(refusal(a.status, &text))
}

/// What a refused or failed call says: paygate's error, the challenge's reason, or the API's
/// status and text.
pub(super) fn refusal(status: reqwest::StatusCode, text: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(text).ok();
    match (&parsed, status.as_u16()) {
        // paygate's own error body.
        (Some(v), _) if v.get("code").is_some() && v.get("requestId").is_some() => format!(
            "paygate refused the call ({}): {}",
            v["code"].as_str().unwrap_or("ERROR"),
            v["message"].as_str().unwrap_or("")
        ),
        // An x402 challenge: the payment was not accepted.
        (Some(v), 402) => format!(
            "the payment was not accepted: {}",
            v.get("error")
                .and_then(Value::as_str)
                .unwrap_or("no reason given")
        ),
        _ => format!("the API answered {status}: {text}"),
    }
}

/// The route's URL on paygate's own public listener (loopback).
pub(super) fn own_url(
    state: &AppState,
    slug: &str,
    entry: &RouteEntry,
) -> Result<url::Url, url::ParseError> {
    url::Url::parse(&format!(
        "http://{}/gateway/{slug}{}",
        state.config.server.local_addr(),
        entry.route.path
    ))
}

/// A tool error when payments on the route's network cannot be settled now (as the proxy
/// answers `503` before any challenge): nothing is signed or offered.
pub(super) fn unsettleable(state: &AppState, req: &PaymentRequirements) -> Option<CallToolResult> {
    (!state.payments.settleable().now(&req.network)).then(|| {
        tool_error(format!(
            "this tool cannot be paid now: payments on {} cannot be settled; try again later",
            req.network.v1_name
        ))
    })
}

/// Calls `entry` of organisation `org_id` (reached at `/gateway/{slug}`) with `args`.
pub async fn call_tool(
    state: &AppState,
    org_id: &str,
    slug: &str,
    entry: Arc<RouteEntry>,
    args: Option<JsonObject>,
) -> Result<CallToolResult, McpError> {
    let input = match ToolInput::parse(args) {
        Ok(i) => i,
        Err(e) => return Ok(tool_error(e.to_string())),
    };
    let Some((req, _)) = &entry.payment else {
        return Ok(tool_error(
            "this API cannot be paid yet: its organisation has no receiver wallet",
        ));
    };
    if let Some(refused) = unsettleable(state, req) {
        return Ok(refused);
    }
    let org = state
        .store
        .get_org(org_id)
        .await
        .map_err(internal)?
        .ok_or_else(|| McpError::invalid_request("organisation no longer exists", None))?;
    let signer = match payer(state, &org) {
        Ok(s) => s,
        Err(e) => return Ok(tool_error(e.to_string())),
    };
    let cap = org
        .mcp_daily_cap
        .unwrap_or_else(|| state.config.mcp.daily_cap());
    // `Date`'s Display is `YYYY-MM-DD`.
    let day = time::OffsetDateTime::now_utc().date().to_string();
    let price = req.amount.0;
    match state
        .store
        .reserve_mcp_spend(org_id, &day, price, cap.0)
        .await
        .map_err(internal)?
    {
        SpendReservation::Reserved { .. } => {}
        SpendReservation::OverCap { total } => {
            return Ok(tool_error(format!(
                "refused: this call costs ${} and MCP tool calls of this organisation have \
                 spent ${} of their ${} daily cap today (UTC)",
                usd(price),
                usd(total),
                usd(cap.0)
            )))
        }
    }
    let release = || async {
        if let Err(e) = state.store.release_mcp_spend(org_id, &day, price).await {
            tracing::warn!(error = %e, "MCP spend not released");
        }
    };
    let header = match payment_header(req, &signer, paygate_domain::unix_now()) {
        Ok(h) => h,
        Err(e) => {
            release().await;
            return Err(internal(e));
        }
    };
    let url = match own_url(state, slug, &entry) {
        Ok(u) => u,
        Err(e) => {
            release().await;
            return Err(internal(e));
        }
    };
    let answer = match send(state, url, &input, ("PAYMENT-SIGNATURE", &header)).await {
        Ok(a) => a,
        Err(e) => {
            // A timeout leaves the outcome open: keep the spend counted (never under-count).
            if !e.is_timeout() {
                release().await;
            }
            tracing::warn!(org = %slug, path = %entry.route.path, error = %e, "MCP tool call failed");
            return Ok(tool_error(if e.is_timeout() {
                "the call timed out; it may have been charged"
            } else {
                "paygate could not reach its own gateway"
            }));
        }
    };
    if !answer.maybe_charged() {
        release().await;
    }
    tracing::info!(
        org = %slug,
        path = %entry.route.path,
        status = answer.status.as_u16(),
        charged = answer.settled(),
        "MCP tool call"
    );
    Ok(result_of(&answer, state.config.mcp.max_result_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Option<JsonObject> {
        v.as_object().cloned()
    }

    #[test]
    fn inputs_are_checked_strictly() {
        let i = ToolInput::parse(None).unwrap();
        assert_eq!(i.method, reqwest::Method::GET);
        let i = ToolInput::parse(args(json!({"body": {"a": 1}}))).unwrap();
        assert_eq!(i.method, reqwest::Method::POST);
        let i = ToolInput::parse(args(json!({"method": "put", "query": {"q": "x"}}))).unwrap();
        assert_eq!(i.method, reqwest::Method::PUT);
        assert_eq!(i.query, vec![("q".to_string(), "x".to_string())]);
        for bad in [
            json!({"method": "TRACE"}),
            json!({"method": 3}),
            json!({"query": {"n": 1}}),
            json!({"query": "a=b"}),
            json!({"method": "GET", "body": "x"}),
            json!({"path": "/etc"}),
        ] {
            assert!(ToolInput::parse(args(bad.clone())).is_err(), "{bad}");
        }
    }

    fn answer(status: u16, body: &str) -> Answer {
        Answer {
            status: reqwest::StatusCode::from_u16(status).unwrap(),
            receipt: None,
            payment_required: None,
            mpp_receipt: None,
            www_authenticate: None,
            content_type: "application/json".into(),
            body: body.as_bytes().to_vec(),
            truncated: false,
        }
    }

    fn text(r: &CallToolResult) -> String {
        serde_json::to_value(&r.content).unwrap()[0]["text"]
            .as_str()
            .unwrap()
            .to_string()
    }

    #[test]
    fn answers_become_results_without_payment_details() {
        let ok = result_of(&answer(200, r#"{"echo":true}"#), 100);
        assert_eq!(ok.is_error, Some(false));
        assert_eq!(text(&ok), r#"{"echo":true}"#);
        assert_eq!(
            ok.structured_content,
            Some(json!({"status": 200, "contentType": "application/json",
                        "body": {"echo": true}, "truncated": false}))
        );
        let plain = result_of(&answer(200, "plain words"), 100);
        assert_eq!(plain.structured_content.unwrap()["body"], "plain words");
        let err = result_of(
            &answer(
                402,
                r#"{"code":"PAYMENT_REJECTED","message":"insufficient funds","requestId":"r"}"#,
            ),
            100,
        );
        assert_eq!(err.is_error, Some(true));
        assert_eq!(
            text(&err),
            "paygate refused the call (PAYMENT_REJECTED): insufficient funds"
        );
        let challenge = result_of(
            &answer(
                402,
                r#"{"x402Version":1,"error":"expired","accepts":[{"payTo":"0x1"}]}"#,
            ),
            100,
        );
        assert_eq!(text(&challenge), "the payment was not accepted: expired");
        let up = result_of(&answer(500, "boom"), 100);
        assert_eq!(
            text(&up),
            "the API answered 500 Internal Server Error: boom"
        );
        let mut cut = answer(200, "héllo");
        cut.body.truncate(2);
        cut.truncated = true;
        assert_eq!(
            text(&result_of(&cut, 2)),
            "h\n[paygate: answer cut at 2 bytes]"
        );
    }
}
