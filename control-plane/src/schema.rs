//! The JSON shapes of the control plane as the OpenAPI document describes them. The handlers
//! parse strictly by hand (`input.rs`), so these types document that parsing rather than
//! perform it; they are read only by `ToSchema`. CI fuzzes every operation with schemathesis
//! against the document (`tests/e2e_openapi.rs`), which keeps the two in step until typed
//! request and response structs replace both (issue 16, item 3).
#![allow(dead_code)]

use utoipa::ToSchema;

/// The error body of every non-2xx answer.
#[derive(ToSchema)]
#[schema(as = Error)]
#[serde(rename_all = "camelCase")]
pub struct ErrorDoc {
    /// Machine-readable code, e.g. `VALIDATION_ERROR`, `NOT_FOUND`.
    code: String,
    message: String,
    /// Also sent as the `x-request-id` response header.
    request_id: String,
    /// One entry per field in error (validation errors only).
    details: Option<Vec<FieldProblemDoc>>,
}

#[derive(ToSchema)]
#[schema(as = FieldProblem)]
pub struct FieldProblemDoc {
    field: String,
    problem: String,
}

#[derive(ToSchema)]
pub struct Health {
    status: String,
    version: String,
}

/// `POST /api/routes`. Unknown and server-assigned fields are refused.
#[derive(ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteCreate {
    /// Path below `/gateway/{orgSlug}`; normalised to one leading `/` and no trailing `/`.
    #[schema(max_length = 514)]
    path: String,
    /// Price per request in USD, at most 6 decimal places.
    #[serde(rename = "priceUSD")]
    #[schema(minimum = 0)]
    price_usd: f64,
    /// Absolute http(s) URL without credentials or fragment, not resolving to an internal
    /// address unless allow-listed.
    #[schema(max_length = 2048)]
    target_url: String,
    /// A configured network, e.g. `base-sepolia` or `eip155:84532`.
    #[schema(max_length = 64)]
    network: String,
    active: Option<bool>,
    streaming: Option<bool>,
    discoverable: Option<bool>,
    #[schema(max_length = 2000)]
    description: Option<String>,
    #[schema(max_length = 64)]
    bazaar_category: Option<String>,
}

/// `PATCH /api/routes/{id}`: any subset of the create fields.
#[derive(ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteUpdate {
    #[schema(max_length = 514)]
    path: Option<String>,
    #[serde(rename = "priceUSD")]
    #[schema(minimum = 0)]
    price_usd: Option<f64>,
    #[schema(max_length = 2048)]
    target_url: Option<String>,
    #[schema(max_length = 64)]
    network: Option<String>,
    active: Option<bool>,
    streaming: Option<bool>,
    discoverable: Option<bool>,
    #[schema(max_length = 2000)]
    description: Option<String>,
    #[schema(max_length = 64)]
    bazaar_category: Option<String>,
}

#[derive(ToSchema)]
#[schema(as = Route)]
#[serde(rename_all = "camelCase")]
pub struct RouteView {
    id: String,
    org_id: String,
    path: String,
    #[serde(rename = "priceUSD")]
    price_usd: f64,
    target_url: String,
    network: String,
    active: bool,
    streaming: bool,
    discoverable: bool,
    description: String,
    #[schema(required)]
    bazaar_category: Option<String>,
    created_at: String,
    updated_at: String,
}

/// `POST /admin/orgs`.
#[derive(ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OrgCreate {
    #[schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    slug: String,
    #[schema(max_length = 200)]
    name: Option<String>,
    /// 0x-prefixed 20-byte hex address (mixed case must carry a valid checksum).
    #[schema(max_length = 42)]
    receiver_wallet: Option<String>,
    /// A configured plan.
    #[schema(max_length = 64)]
    plan: Option<String>,
}

/// `PATCH /admin/orgs/{slug}`.
#[derive(ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OrgUpdate {
    #[schema(max_length = 200)]
    name: Option<String>,
    suspended: Option<bool>,
    #[schema(max_length = 42)]
    receiver_wallet: Option<String>,
    #[schema(max_length = 64)]
    plan: Option<String>,
    /// Daily MCP spending cap in USD (number or decimal string); `null`: the configured default.
    #[serde(rename = "mcpDailyCapUSD")]
    #[schema(value_type = Option<Object>)]
    mcp_daily_cap_usd: Option<serde_json::Value>,
    /// Platform fee in basis points (25 to 65); `null`: the configured default.
    #[schema(minimum = 25, maximum = 65)]
    platform_fee_bps: Option<u32>,
}

#[derive(ToSchema)]
#[schema(as = Org)]
#[serde(rename_all = "camelCase")]
pub struct OrgView {
    id: String,
    slug: String,
    name: String,
    #[schema(required)]
    receiver_wallet: Option<String>,
    plan: String,
    suspended: bool,
    #[schema(required)]
    payer_wallet: Option<String>,
    #[serde(rename = "mcpDailyCapUSD")]
    #[schema(required)]
    mcp_daily_cap_usd: Option<f64>,
    #[schema(required)]
    platform_fee_bps: Option<u32>,
    created_at: String,
    updated_at: String,
}

/// The new organisation and its first API key (shown only here).
#[derive(ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrgCreated {
    #[serde(flatten)]
    org: OrgView,
    api_key: String,
    key_id: String,
}

/// `PUT /admin/orgs/{slug}/payer-wallet`.
#[derive(ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PayerWalletPut {
    /// secp256k1 private key, 64 hex characters (optionally 0x-prefixed).
    #[schema(max_length = 200)]
    private_key: String,
}

#[derive(ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyCreated {
    key_id: String,
    /// The key itself: shown only in this answer, stored only as its SHA-256.
    api_key: String,
    created_at: String,
}

#[derive(ToSchema)]
#[schema(as = ApiKey)]
#[serde(rename_all = "camelCase")]
pub struct KeyView {
    key_id: String,
    created_at: String,
    #[schema(required)]
    revoked_at: Option<String>,
}

/// A page of the x402 bazaar discovery list.
#[derive(ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveryPage {
    x402_version: u8,
    /// x402 discovery items (`resource`, `type`, `accepts`, `lastUpdated`, `metadata`).
    items: Vec<serde_json::Value>,
    pagination: Pagination,
}

#[derive(ToSchema)]
pub struct Pagination {
    limit: u64,
    offset: u64,
    total: u64,
}

#[derive(ToSchema)]
pub struct OrgMetrics {
    metrics: MetricsWindow,
    facilitator: FacilitatorHealth,
}

#[derive(ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricsWindow {
    window: String,
    org_id: String,
    total_requests: u64,
    #[serde(rename = "unpaid402")]
    unpaid_402: u64,
    paid: u64,
    errors: u64,
    #[schema(required)]
    avg_challenge_ms: Option<f64>,
    #[schema(required)]
    avg_settle_ms: Option<f64>,
    error_rate: f64,
}

#[derive(ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FacilitatorHealth {
    /// `healthy`, `degraded`, `down` or `unknown`.
    status: String,
    #[schema(required)]
    latency_ms: Option<u64>,
    #[schema(required)]
    checked_at: Option<String>,
    #[schema(required)]
    facilitator_url: Option<String>,
}

/// x402 facilitator request (`/verify`, `/settle`).
#[derive(ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FacilitatorRequestDoc {
    #[schema(minimum = 1, maximum = 2)]
    x402_version: u8,
    /// The client's payment payload (v1 or v2 shape). Any JSON is accepted here; one that is not
    /// a valid payment is answered `200` with `isValid: false` / `success: false`.
    payment_payload: serde_json::Value,
    /// The requirement the payment answers (same rule as `paymentPayload`).
    payment_requirements: serde_json::Value,
}

#[derive(ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerifyResponseDoc {
    is_valid: bool,
    invalid_reason: Option<String>,
    payer: Option<String>,
}

#[derive(ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SettleResponseDoc {
    success: bool,
    error_reason: Option<String>,
    /// Transaction hash; empty when `success` is false.
    transaction: String,
    network: String,
    payer: Option<String>,
}

#[derive(ToSchema)]
pub struct SupportedDoc {
    kinds: Vec<SupportedKindDoc>,
}

#[derive(ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SupportedKindDoc {
    x402_version: u8,
    scheme: String,
    network: String,
}

/// `POST /corridors`.
#[derive(ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CorridorCreate {
    #[schema(value_type = String)]
    dest_currency: CurrencyDoc,
}

#[derive(ToSchema)]
#[schema(as = Currency)]
pub enum CurrencyDoc {
    #[schema(rename = "BRL")]
    Brl,
    #[schema(rename = "MXN")]
    Mxn,
    #[schema(rename = "NGN")]
    Ngn,
    #[schema(rename = "KES")]
    Kes,
    #[schema(rename = "ZAR")]
    Zar,
}

#[derive(ToSchema)]
#[schema(as = Corridor)]
#[serde(rename_all = "camelCase")]
pub struct CorridorView {
    id: String,
    org_id: String,
    dest_currency: String,
    /// `PENDING_KYC` or `ACTIVE`.
    status: String,
    created_at: String,
    updated_at: String,
}

#[derive(ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Fees {
    currency: String,
    platform_fee_percent: String,
    platform_fee: String,
    rail_fee: String,
    total: String,
}

#[derive(ToSchema)]
#[schema(as = Quote)]
#[serde(rename_all = "camelCase")]
pub struct QuoteView {
    quote_id: String,
    corridor_id: String,
    /// USDC, decimal string.
    amount: String,
    fx_rate: String,
    dest_amount: String,
    dest_currency: String,
    fees: Fees,
    expires_at: String,
}

/// `POST /corridors/{id}/pay`.
#[derive(ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PayRequest {
    #[schema(min_length = 1, max_length = 128)]
    quote_id: String,
    /// 0x-prefixed 20-byte hex address.
    #[schema(min_length = 1, max_length = 128)]
    from_address: String,
    /// USDC decimal string, equal to the quote's amount.
    #[serde(rename = "amountUSDC")]
    #[schema(min_length = 1, max_length = 128)]
    amount_usdc: String,
    beneficiary: BeneficiaryDoc,
}

#[derive(ToSchema)]
#[schema(as = Beneficiary)]
#[serde(rename_all = "camelCase")]
pub struct BeneficiaryDoc {
    name: String,
    bank_name: String,
    /// Format depends on the currency (e.g. NUBAN for NGN, CLABE for MXN).
    account_number: String,
    country: String,
    currency: String,
}

#[derive(ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PayoutAccepted {
    payment_id: String,
    #[schema(required)]
    cpn_payment_id: Option<String>,
    status: String,
}

#[derive(ToSchema)]
#[schema(as = Payout)]
#[serde(rename_all = "camelCase")]
pub struct PayoutView {
    payment_id: String,
    corridor_id: String,
    #[schema(required)]
    cpn_payment_id: Option<String>,
    /// `PENDING`, `PROCESSING`, `COMPLETED`, `FAILED`.
    status: String,
    quote_id: String,
    from_address: String,
    #[serde(rename = "amountUSDC")]
    amount_usdc: String,
    fx_rate: String,
    dest_amount: String,
    dest_currency: String,
    fees: Fees,
    /// Account number masked but for its last digits.
    beneficiary: BeneficiaryDoc,
    /// The last provider event applied, if any.
    #[schema(required)]
    last_event: Option<serde_json::Value>,
    created_at: String,
    updated_at: String,
}

#[derive(ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookAck {
    /// `applied`, `ignored`, `duplicate` or `kept`.
    status: String,
    payment_status: Option<String>,
}

/// A JSON-RPC 2.0 message (MCP).
#[derive(ToSchema)]
#[schema(as = JsonRpcMessage)]
pub struct JsonRpcDoc {
    jsonrpc: String,
    id: Option<serde_json::Value>,
    method: Option<String>,
    params: Option<serde_json::Value>,
}
