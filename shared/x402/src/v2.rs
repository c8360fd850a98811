//! x402 version 2 wire types (`PAYMENT-REQUIRED` / `PAYMENT-SIGNATURE`, CAIP-2 networks).

use crate::extra::TokenExtra;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequirementsV2 {
    pub scheme: String,
    pub network: String,
    pub amount: String,
    pub asset: String,
    pub pay_to: String,
    pub max_timeout_seconds: u64,
    pub extra: TokenExtra,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceInfo {
    pub url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequiredV2 {
    pub x402_version: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub resource: ResourceInfo,
    pub accepts: Vec<PaymentRequirementsV2>,
    /// x402 extensions the server declares (e.g. `bazaar` discovery data).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<crate::extensions::Extensions>,
}

/// `doc` as the `PAYMENT-REQUIRED` header carries it: base64 of its JSON.
pub fn header(doc: &PaymentRequiredV2) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(doc).unwrap_or_default())
}
