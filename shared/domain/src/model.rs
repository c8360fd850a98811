//! The records the service keeps: organisations, API keys, routes, idempotency records.

pub use crate::escrow::{EscrowCapture, EscrowRecord, EscrowRefund};
use alloy_primitives::Address;
use paygate_x402::money::UsdcAmount;
use serde::{Deserialize, Serialize};

/// An organisation (tenant). Its slug is immutable and appears in gateway URLs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Org {
    pub id: String,
    pub slug: String,
    pub name: String,
    /// Payee of gateway payments; without one the org's routes answer `503 MISCONFIGURED`.
    pub receiver_wallet: Option<Address>,
    pub plan: String,
    pub suspended: bool,
    /// Address of the payer wallet used for MCP tool calls (the key itself is sealed).
    #[serde(default)]
    pub payer_wallet: Option<Address>,
    /// The payer wallet's private key, sealed under the master key; never returned.
    #[serde(default)]
    pub payer_key: Option<crate::secrets::SealedSecret>,
    /// Daily cap on MCP tool-call spending set by the operator; `None` = the configured default.
    #[serde(default)]
    pub mcp_daily_cap: Option<UsdcAmount>,
    /// Corridor platform fee in basis points set by the operator; `None` = the configured default.
    #[serde(default)]
    pub platform_fee_bps: Option<u32>,
    /// The generation of the org's origin secret (derived, never stored: `origin_proof`).
    #[serde(default)]
    pub origin_secret_generation: u32,
    /// When the origin secret was last rotated (unix seconds): the previous one keeps signing
    /// next to it for a grace period.
    #[serde(default)]
    pub origin_secret_rotated_at: Option<u64>,
    pub created_at: String,
    pub updated_at: String,
}

/// A plan slot a payment takes in the store: the month it counts in and the organisation's
/// limit when it was taken (0: unlimited).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanSlot {
    pub month: String,
    pub limit: u64,
}

/// A stored API key: only the SHA-256 of its secret part is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyRecord {
    pub key_id: String,
    pub org_id: String,
    /// Hex SHA-256 of the secret.
    pub secret_sha256: String,
    pub created_at: String,
    pub revoked_at: Option<String>,
    /// What the key may do (keys written before issue 32 are `full`).
    #[serde(default)]
    pub role: KeyRole,
    /// RFC 3339: refused from this moment on (`None`: never expires).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// An API key's role: what its holder may do. Every endpoint needs one [`KeyRole`] at least
/// (`read` < `routes`, `payouts` < `full`; `routes` and `payouts` each add their own writes
/// to `read`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum KeyRole {
    /// Reads everything an organisation's key reads; changes nothing.
    Read,
    /// `read`, and the routes' changes.
    Routes,
    /// `read`, and what moves the organisation's money: corridors, payouts, channel claims and
    /// refunds.
    Payouts,
    /// Everything, keys and the origin secret included.
    #[default]
    Full,
}

impl KeyRole {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Routes => "routes",
            Self::Payouts => "payouts",
            Self::Full => "full",
        }
    }

    /// Whether a key of this role may call an endpoint that needs `need`.
    pub fn allows(self, need: KeyRole) -> bool {
        self == Self::Full || need == Self::Read || self == need
    }
}

/// A paid route: `/gateway/{org.slug}{path}` forwards to `target_url` for `price` per request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Route {
    pub id: String,
    pub org_id: String,
    /// Stored form: exactly one leading `/`, no trailing `/`.
    pub path: String,
    pub price: UsdcAmount,
    /// The first target's URL: the one-target form the API has always shown.
    pub target_url: String,
    /// Every upstream, with its weight (empty in records written before issue 18: then the one
    /// target is `target_url` with weight 1, see [`Route::targets`]).
    #[serde(default)]
    pub targets: Vec<RouteTarget>,
    /// How a request picks among several targets.
    #[serde(default)]
    pub balancing: Balancing,
    /// Active health checks of the targets; `None`: passive ejection only.
    #[serde(default)]
    pub health_check: Option<HealthCheck>,
    /// As given by the client (`base` or `eip155:8453` style).
    pub network: String,
    pub active: bool,
    pub streaming: bool,
    pub discoverable: bool,
    /// The origin deduplicates by `X-Paygate-Payment-Id`: a retry of a settled payment the
    /// origin never answered may be forwarded again (closing the at-most-once window).
    #[serde(default)]
    pub origin_deduplicates: bool,
    pub description: String,
    pub bazaar_category: Option<String>,
    /// What the route answers (`application/json`): its challenges' and discovery's
    /// `mimeType` (empty when unset).
    #[serde(default)]
    pub mime_type: Option<String>,
    /// JSON Schema of what the route takes (its body, or query for GET): shown in discovery,
    /// the challenge's bazaar extension and MCP tool lists. Checked as a schema when set.
    #[serde(default)]
    pub input_schema: Option<serde_json::Value>,
    /// JSON Schema of what the route answers.
    #[serde(default)]
    pub output_schema: Option<serde_json::Value>,
    /// Offered as a tool at the public MCP endpoint `/mcp/x402/{orgSlug}`, where any agent
    /// calls it and pays with its own wallet (x402's MCP transport).
    #[serde(default)]
    pub public_tool: bool,
    /// The x402 schemes the route accepts, in the order its challenge lists them (a record
    /// written before issue 29 stored none: `exact` alone).
    #[serde(default = "exact_only")]
    pub schemes: Vec<Scheme>,
    /// The agent payment protocols its `402` offers (both unless its seller turned one off).
    #[serde(default = "both_protocols")]
    pub protocols: Vec<PaymentProtocol>,
    /// How a request is charged: the price (`fixed`), or what the origin states in
    /// `X-Paygate-Charge`, at most the price (`usage`).
    #[serde(default)]
    pub pricing: Pricing,
    /// A payment grants its payer this route for this many seconds: the payer comes back by
    /// signing in (`SIGN-IN-WITH-X`) instead of paying again (`None`: every call is paid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_window_seconds: Option<u64>,
    /// With a window: how many calls it allows beyond the paid one (`None`: any number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_window_calls: Option<u32>,
    /// `auth-capture`: how many seconds after its capture deadline a payment may still be
    /// refunded (`None`: refunds off, the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refund_window_seconds: Option<u64>,
    /// The token the route is paid in: `USDC` or a token its network lists.
    #[serde(default = "usdc")]
    pub token: String,
    /// Nanoseconds since the epoch; orders the list newest first.
    pub created_at_ns: i128,
    pub created_at: String,
    pub updated_at: String,
}

/// How a route may be paid: the x402 schemes paygate serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub enum Scheme {
    /// One on-chain settlement per request (an EIP-3009 transfer).
    #[serde(rename = "exact")]
    Exact,
    /// Payment channels: one deposit, then a cumulative voucher per request, claimed in
    /// batches (x402 `batch-settlement`).
    #[serde(rename = "batch-settlement")]
    BatchSettlement,
    /// One Permit2 authorization for the price as a ceiling, settled for what the origin
    /// states the call cost (x402 `upto`; `pricing: "usage"` routes).
    #[serde(rename = "upto")]
    Upto,
    /// The payer's authorization held in escrow before forwarding, captured for what was
    /// served, voided when nothing was, refundable within the route's refund window (x402
    /// `auth-capture`).
    #[serde(rename = "auth-capture")]
    AuthCapture,
}

impl Scheme {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Exact => "exact",
            Self::BatchSettlement => paygate_x402::batch::SCHEME,
            Self::Upto => paygate_x402::UPTO_SCHEME,
            Self::AuthCapture => paygate_x402::auth_capture::SCHEME,
        }
    }
}

/// The token of a route that names none.
pub fn usdc() -> String {
    paygate_x402::network::USDC.to_string()
}

pub use crate::protocol::{both_protocols, PaymentProtocol, PaymentTransfer};

/// How a route's requests are charged (DECISIONS: `pricing`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Pricing {
    /// Every request costs the route's price.
    #[default]
    Fixed,
    /// The price is a ceiling: the origin states what a call cost in the `X-Paygate-Charge`
    /// response header (or a trailer of that name on a streamed answer), in decimal USD; the
    /// charge is that, at most the price, and the price when the origin says nothing.
    Usage,
}

/// The schemes of a route that names none.
pub fn exact_only() -> Vec<Scheme> {
    vec![Scheme::Exact]
}

impl Route {
    /// Whether the route accepts `scheme`.
    pub fn accepts(&self, scheme: Scheme) -> bool {
        self.schemes.contains(&scheme)
    }

    /// The route's upstreams: `targets`, or for a record that has none, `target_url` alone.
    pub fn targets(&self) -> Vec<RouteTarget> {
        if self.targets.is_empty() {
            vec![RouteTarget {
                url: self.target_url.clone(),
                weight: 1,
            }]
        } else {
            self.targets.clone()
        }
    }

    /// Sets the upstreams (and `target_url`, the first one's URL).
    pub fn set_targets(&mut self, targets: Vec<RouteTarget>) {
        if let Some(first) = targets.first() {
            self.target_url = first.url.clone();
        }
        self.targets = targets;
    }
}

/// One upstream of a route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteTarget {
    pub url: String,
    /// Relative share of the requests (1 to 1000).
    pub weight: u32,
}

/// How a request picks among a route's targets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "strategy")]
pub enum Balancing {
    /// Weighted round robin.
    #[default]
    #[serde(rename = "round_robin")]
    RoundRobin,
    /// Consistent hashing on a request header's value: one client (by that header) keeps its
    /// target while the targets stay the same.
    #[serde(rename = "hash")]
    Hash { header: String },
}

/// Active health checks of a route's targets: `GET path` every `interval_seconds`, healthy
/// after `healthy_threshold` answers of 2xx in a row, unhealthy after `unhealthy_threshold`
/// failures in a row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheck {
    pub path: String,
    pub interval_seconds: u32,
    pub healthy_threshold: u32,
    pub unhealthy_threshold: u32,
}

/// A remembered response to an `Idempotency-Key`, scoped to one organisation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IdempotencyRecord {
    pub org_id: String,
    pub key: String,
    /// Hex SHA-256 over method, path and canonical body of the first request.
    pub fingerprint: String,
    pub status: u16,
    pub body: String,
    /// Unix seconds; records older than the TTL are purged.
    pub created_at_unix: i64,
}

/// An x402 `payment-identifier` a client gave with a payment, scoped to one organisation: the
/// payment it names (by fingerprint) and, once the upstream answered, that answer, so the same
/// payment sent again gets it back without paying again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentIdRecord {
    pub org_id: String,
    /// The client's id (16 to 128 of `[A-Za-z0-9_-]`).
    pub key: String,
    /// Hex SHA-256 of the signed authorization (nonce key and signature): the same payment.
    pub fingerprint: String,
    /// Unix seconds; records older than the window are purged (and may be claimed again).
    pub created_at_unix: i64,
    #[serde(default)]
    pub result: Option<PaidAnswer>,
}

/// The answer a paid request got: what a retry with the same payment identifier is given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaidAnswer {
    pub payment_id: String,
    pub status: u16,
    #[serde(default)]
    pub content_type: Option<String>,
    /// The body, base64.
    pub body: String,
    /// `payment-response` or `x-payment-response`.
    pub receipt_header: String,
    pub receipt: String,
}

/// Where a gateway payment stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PaymentStatus {
    /// The nonce is reserved; settlement has not finished.
    Reserved,
    /// Settled on-chain (`transaction` is set).
    Settled,
    /// Definitely not settled.
    Failed,
    /// Sent but the outcome is unknown (timeout after broadcast): to be reconciled.
    Unknown,
}

impl PaymentStatus {
    /// The name the API and the stores use.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Reserved => "RESERVED",
            Self::Settled => "SETTLED",
            Self::Failed => "FAILED",
            Self::Unknown => "UNKNOWN",
        }
    }

    /// The outcome is not recorded yet: reconciliation decides it.
    pub fn is_open(self) -> bool {
        matches!(self, Self::Reserved | Self::Unknown)
    }
}

/// One payment taken at the gateway, keyed by id; its nonce key guards against replay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayPayment {
    pub id: String,
    pub org_id: String,
    pub route_id: String,
    /// `chainId:asset:from:nonce`, lower-case hex: the replay guard's key.
    pub nonce_key: String,
    pub network: String,
    pub asset: String,
    pub payer: String,
    pub pay_to: String,
    pub amount: UsdcAmount,
    /// The paid resource's URL as the challenge named it (a signed receipt names it).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource: String,
    /// How the token moves (EIP-3009 for records written before Permit2 payments).
    #[serde(default, skip_serializing_if = "PaymentTransfer::is_eip3009")]
    pub transfer: PaymentTransfer,
    /// The protocol the payment came in (x402 for records written before MPP).
    #[serde(default, skip_serializing_if = "PaymentProtocol::is_x402")]
    pub protocol: PaymentProtocol,
    pub status: PaymentStatus,
    pub transaction: Option<String>,
    pub failure: Option<String>,
    pub verify_us: u64,
    pub settle_ms: Option<u64>,
    pub upstream_status: Option<u16>,
    /// The authorization's `validBefore` (unix seconds): after it, an unsettled payment can no
    /// longer land, which lets reconciliation close it.
    #[serde(default)]
    pub valid_before: u64,
    /// Set when reconciliation, not the request that took the payment, found it settled: that
    /// request never reached the upstream (it forwards only after recording `Settled` itself),
    /// so one retry of the same signed payment is served instead of refused as a replay.
    #[serde(default)]
    pub settled_by_reconciliation: bool,
    /// When a retry claimed the payment above (at most one does).
    #[serde(default)]
    pub redeemed_at: Option<String>,
    /// An `auth-capture` payment's escrow: its terms and what was captured, voided, refunded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escrow: Option<Box<EscrowRecord>>,
    /// On a cluster: the plan slot this payment takes in the store, taken in the transaction
    /// that reserves it. Reconciliation gives it back if the payment closes `Failed`, so a node
    /// killed before the outcome leaks no slot (`None` on one node: slots counted in memory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_slot: Option<PlanSlot>,
    pub created_at: String,
    pub updated_at: String,
}

/// The `route_id` of a payment settled through the facilitator API for another x402 server:
/// this deployment served no request for it.
pub const FACILITATOR_API_ROUTE: &str = "facilitator-api";

impl GatewayPayment {
    /// Why this deployment may not sign a receipt for this payment (`None`: it may). A receipt
    /// says this deployment served the named resource for the payment: only a settled payment
    /// of one of the organisation's own routes (never a facilitator settlement for another
    /// server, whose resource its caller named), whose origin served it (answered below 400),
    /// and that was not refunded in full.
    pub fn unreceiptable(&self) -> Option<&'static str> {
        if self.status != PaymentStatus::Settled {
            return Some("the payment is not settled: it has no receipt");
        }
        if self.route_id == FACILITATOR_API_ROUTE {
            return Some(
                "settled through the facilitator API for another server: this deployment served \
                 no request for it, so it signs no receipt",
            );
        }
        match self.upstream_status {
            Some(s) if s < 400 => {}
            Some(_) => return Some("the origin did not serve the request: it has no receipt"),
            None => return Some("the request was not recorded as served (yet): it has no receipt"),
        }
        if self
            .escrow
            .as_ref()
            .is_some_and(|e| e.captured.0 > 0 && e.refundable().0 == 0)
        {
            return Some("the payment was refunded in full: it has no receipt");
        }
        None
    }

    /// A new `Reserved` payment of `auth` against `req`, for `org_id`/`route_id`.
    pub fn reserved(
        org_id: &str,
        route_id: &str,
        req: &paygate_x402::PaymentRequirements,
        auth: &paygate_x402::payment::SignedAuthorization,
        verify_us: u64,
    ) -> Self {
        let now = crate::clock::now_rfc3339();
        Self {
            id: crate::ids::new_id("pay"),
            org_id: org_id.to_string(),
            route_id: route_id.to_string(),
            nonce_key: nonce_key(req.network.config.chain_id, req.network.config.asset, auth),
            network: req.network.caip2.clone(),
            asset: req.network.config.asset.to_checksum(None),
            payer: auth.from.to_checksum(None),
            pay_to: req.pay_to.to_checksum(None),
            amount: req.amount,
            resource: req.resource.clone(),
            transfer: if req.permit2() {
                PaymentTransfer::Permit2
            } else {
                PaymentTransfer::Eip3009
            },
            protocol: PaymentProtocol::X402,
            status: PaymentStatus::Reserved,
            transaction: None,
            failure: None,
            verify_us,
            settle_ms: None,
            upstream_status: None,
            valid_before: u64::try_from(auth.valid_before).unwrap_or(u64::MAX),
            settled_by_reconciliation: false,
            redeemed_at: None,
            plan_slot: None,
            escrow: None,
            created_at: now.clone(),
            updated_at: now,
        }
    }

    /// Whether a retry presenting `retry` may be forwarded again on this payment, for a route
    /// whose origin deduplicates by payment id: settled, its origin never answered (a crash or
    /// an upstream failure came between), for the same route, payer, payee and amount.
    pub fn redeliverable_by(&self, retry: &GatewayPayment) -> bool {
        self.status == PaymentStatus::Settled
            && self.upstream_status.is_none()
            && self.same_authorization(retry)
    }

    fn same_authorization(&self, retry: &GatewayPayment) -> bool {
        self.nonce_key == retry.nonce_key
            && self.route_id == retry.route_id
            && self.payer == retry.payer
            && self.pay_to == retry.pay_to
            && self.amount == retry.amount
    }

    /// Whether a retry presenting `retry` (the same authorization, verified again) may be
    /// served on this payment: settled by reconciliation, never redeemed, for the same route,
    /// payer, payee and amount.
    pub fn redeemable_by(&self, retry: &GatewayPayment) -> bool {
        self.status == PaymentStatus::Settled
            && self.settled_by_reconciliation
            && self.redeemed_at.is_none()
            && self.same_authorization(retry)
    }

    /// The authorization nonce, read back from the nonce key.
    pub fn authorization_nonce(&self) -> Option<alloy_primitives::B256> {
        let hex = self.nonce_key.rsplit(':').next()?;
        format!("{hex:0>64}").parse().ok()
    }
}

/// `chainId:asset:from:nonce`, lower-case hex: one authorization, whatever casing it came in.
pub fn nonce_key(
    chain_id: u64,
    asset: Address,
    auth: &paygate_x402::payment::SignedAuthorization,
) -> String {
    format!("{chain_id}:{asset:x}:{:x}:{:x}", auth.from, auth.nonce)
}

/// Request counters of one organisation over one minute (the unit metrics windows are summed
/// from). Latency sums are kept with their counts so means stay exact across merges.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MetricBucket {
    pub total: u64,
    pub unpaid402: u64,
    pub paid: u64,
    pub errors: u64,
    pub challenge_us_sum: u64,
    pub challenge_count: u64,
    pub settle_ms_sum: u64,
    pub settle_count: u64,
    /// USDC base units received.
    pub revenue: u64,
    /// USDC base units refunded to payers (of what was received, in this or an earlier period).
    pub refunded: u64,
    /// Of `paid`, the requests paid in MPP (the rest came in x402).
    pub paid_mpp: u64,
}

impl MetricBucket {
    pub fn merge(&mut self, o: &MetricBucket) {
        self.total += o.total;
        self.unpaid402 += o.unpaid402;
        self.paid += o.paid;
        self.paid_mpp += o.paid_mpp;
        self.errors += o.errors;
        self.challenge_us_sum += o.challenge_us_sum;
        self.challenge_count += o.challenge_count;
        self.settle_ms_sum += o.settle_ms_sum;
        self.settle_count += o.settle_count;
        self.revenue = self.revenue.saturating_add(o.revenue);
        self.refunded = self.refunded.saturating_add(o.refunded);
    }
}
