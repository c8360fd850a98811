//! Wire types of the standard facilitator HTTP API (`/verify`, `/settle`, `/supported`).

use serde::{Deserialize, Serialize};

/// The body of `/verify` and `/settle`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct FacilitatorRequest {
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 2))]
    pub x402_version: u8,
    /// The client's payment payload (v1 or v2 shape). Any JSON is accepted here; one that is
    /// not a valid payment is answered `200` with `isValid: false` / `success: false`.
    pub payment_payload: serde_json::Value,
    /// The requirement the payment answers (same rule as `paymentPayload`).
    pub payment_requirements: serde_json::Value,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct VerifyResponse {
    pub is_valid: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    /// Scheme-specific details (`batch-settlement`: the channel as the chain has it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub extra: Option<serde_json::Value>,
}

/// Also the receipt carried (base64) in `X-PAYMENT-RESPONSE` / `PAYMENT-RESPONSE`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SettleResponse {
    pub success: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_reason: Option<String>,
    /// A failure's words, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// Transaction hash; empty when `success` is false, except `settlement_pending` (the
    /// transaction sent and not confirmed yet).
    #[serde(default)]
    pub transaction: String,
    #[serde(default)]
    pub network: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    /// What moved (`batch-settlement`: a deposit's or refund's amount, what a settlement
    /// transferred).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount: Option<String>,
    /// Scheme-specific details (`batch-settlement`: `chargedAmount` and `channelState`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub extra: Option<serde_json::Value>,
    /// Extensions' answers (`offer-receipt`: the server's signed receipt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub extensions: Option<serde_json::Value>,
}

/// The `errorReason` of a settlement sent and not confirmed within the request's time.
pub const SETTLEMENT_PENDING: &str = "settlement_pending";

impl SettleResponse {
    /// x402's answer for a settlement sent (`transaction`) and not confirmed in its time.
    pub fn pending(
        transaction: alloy_primitives::B256,
        network: String,
        payer: alloy_primitives::Address,
    ) -> Self {
        Self {
            success: false,
            error_reason: Some(SETTLEMENT_PENDING.into()),
            error_message: None,
            transaction: format!("{transaction:#x}"),
            network,
            payer: Some(payer.to_checksum(None)),
            amount: None,
            extra: None,
            extensions: None,
        }
    }
}

/// A sandbox route's receipt: a settle response marked `sandbox: true`, carrying no
/// transaction (nothing was settled).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxReceipt {
    #[serde(flatten)]
    pub settle: SettleResponse,
    pub sandbox: bool,
}

/// The body of a `402` answering a refused payment: the server's own error fields (`server`,
/// flattened: paygate's `code`, `message`, `requestId`) beside x402's `x402Version`, `error`
/// (the reason word) and `accepts` (the requirements in the body's version).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RefusedPaymentBody<E, A> {
    #[serde(flatten)]
    pub server: E,
    pub x402_version: u8,
    pub error: &'static str,
    pub accepts: A,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = SupportedKind))]
#[serde(rename_all = "camelCase")]
pub struct SupportedKindWire {
    pub x402_version: u8,
    pub scheme: String,
    pub network: String,
    /// What a server puts in its requirements' `extra` for this kind (`upto`: the
    /// `facilitatorAddress` payers name in their witness).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub extra: Option<serde_json::Value>,
}

impl From<super::SupportedKind> for SupportedKindWire {
    fn from(k: super::SupportedKind) -> Self {
        Self {
            x402_version: k.x402_version,
            scheme: k.scheme,
            network: k.network,
            extra: None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = Supported))]
pub struct SupportedResponse {
    pub kinds: Vec<SupportedKindWire>,
    /// The extensions it carries out when settling (x402's `supported.extensions`): here
    /// `eip2612GasSponsoring` when it settles on chain itself.
    #[serde(default)]
    pub extensions: Vec<String>,
    /// paygate's extension: when a network lists several facilitators, each of them (tried in
    /// order), whether it answers and how many settlements it made: which one is serving.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub facilitators: Vec<SupportedMemberWire>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = SupportedFacilitator))]
pub struct SupportedMemberWire {
    pub network: String,
    pub url: String,
    pub healthy: bool,
    pub settled: u64,
}
