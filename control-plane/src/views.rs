//! Response bodies of the control plane: each is the type the handler serialises and the one
//! the OpenAPI document describes (serde and utoipa derives on the same struct).

use paygate_domain::model::{ApiKeyRecord, Balancing, Org, Route};
use paygate_gateway::balancer::TargetHealth;
use serde::Serialize;
use utoipa::ToSchema;

/// A route as the management API shows it.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Route)]
#[serde(rename_all = "camelCase")]
pub struct RouteView {
    id: String,
    org_id: String,
    path: String,
    /// USD per request, a JSON number.
    #[serde(rename = "priceUSD")]
    #[schema(value_type = f64)]
    price_usd: Box<serde_json::value::RawValue>,
    /// The first target's URL (the one-target form).
    target_url: String,
    /// Every upstream; `healthy` as this node sees it (`null`: not tracked, i.e. one target
    /// without health checks, or the answer to a change).
    targets: Vec<TargetView>,
    load_balancing: BalancingView,
    #[schema(required)]
    health_check: Option<HealthCheckView>,
    network: String,
    active: bool,
    streaming: bool,
    discoverable: bool,
    origin_deduplicates: bool,
    description: String,
    #[schema(required)]
    bazaar_category: Option<String>,
    /// What the route answers (null: not said).
    #[schema(required)]
    mime_type: Option<String>,
    /// JSON Schema of what the route takes (null: not said).
    #[schema(required, value_type = Option<Object>)]
    input_schema: Option<serde_json::Value>,
    /// JSON Schema of what the route answers (null: not said).
    #[schema(required, value_type = Option<Object>)]
    output_schema: Option<serde_json::Value>,
    /// Offered at the public MCP endpoint `/mcp/x402/{orgSlug}`, paid by the caller.
    public_tool: bool,
    /// The x402 schemes the route accepts, in its challenge's order.
    schemes: Vec<paygate_domain::model::Scheme>,
    /// The agent payment protocols its `402` offers (`x402`, `mpp`).
    #[schema(value_type = Vec<String>)]
    protocols: Vec<paygate_domain::model::PaymentProtocol>,
    /// `fixed` (the price per request) or `usage` (the origin's `X-Paygate-Charge`, at most the
    /// price).
    pricing: paygate_domain::model::Pricing,
    /// Seconds a payment grants its payer this route, signing in instead of paying (null: no
    /// access window, every call paid).
    #[schema(required)]
    access_window_seconds: Option<u64>,
    /// Calls a window serves beyond the paid one (null: any number within its period).
    #[schema(required)]
    access_window_calls: Option<u32>,
    /// Seconds after the capture deadline an `auth-capture` payment may be refunded (null:
    /// refunds off).
    #[schema(required)]
    refund_window_seconds: Option<u64>,
    /// The token the route is paid in.
    token: String,
    created_at: String,
    updated_at: String,
}

impl From<&Route> for RouteView {
    fn from(r: &Route) -> Self {
        Self {
            id: r.id.clone(),
            org_id: r.org_id.clone(),
            path: r.path.clone(),
            price_usd: r.price.to_usd_json(),
            target_url: r.target_url.clone(),
            targets: r
                .targets()
                .into_iter()
                .map(|t| TargetView {
                    url: t.url,
                    weight: t.weight,
                    healthy: None,
                    ejected: None,
                })
                .collect(),
            load_balancing: match &r.balancing {
                Balancing::RoundRobin => BalancingView {
                    strategy: "round_robin",
                    header: None,
                },
                Balancing::Hash { header } => BalancingView {
                    strategy: "hash",
                    header: Some(header.clone()),
                },
            },
            health_check: r.health_check.as_ref().map(|h| HealthCheckView {
                path: h.path.clone(),
                interval_seconds: h.interval_seconds,
                healthy_threshold: h.healthy_threshold,
                unhealthy_threshold: h.unhealthy_threshold,
            }),
            network: r.network.clone(),
            active: r.active,
            streaming: r.streaming,
            discoverable: r.discoverable,
            origin_deduplicates: r.origin_deduplicates,
            description: r.description.clone(),
            bazaar_category: r.bazaar_category.clone(),
            mime_type: r.mime_type.clone(),
            input_schema: r.input_schema.clone(),
            output_schema: r.output_schema.clone(),
            public_tool: r.public_tool,
            schemes: r.schemes.clone(),
            protocols: r.protocols.clone(),
            pricing: r.pricing,
            access_window_seconds: r.access_window_seconds,
            access_window_calls: r.access_window_calls,
            refund_window_seconds: r.refund_window_seconds,
            token: r.token.clone(),
            created_at: r.created_at.clone(),
            updated_at: r.updated_at.clone(),
        }
    }
}

/// One upstream of a route.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetView {
    url: String,
    weight: u32,
    /// Passing its health checks and not ejected, on this node.
    #[schema(required)]
    healthy: Option<bool>,
    /// Left out for a while after connection failures in a row, on this node.
    #[schema(required)]
    ejected: Option<bool>,
}

/// How requests are spread over a route's targets.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BalancingView {
    /// `round_robin` (weighted) or `hash`.
    strategy: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    header: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckView {
    path: String,
    interval_seconds: u32,
    healthy_threshold: u32,
    unhealthy_threshold: u32,
}

impl RouteView {
    /// With the health of its targets as this node's balancer sees them.
    pub fn with_health(mut self, health: Option<Vec<TargetHealth>>) -> Self {
        for (view, h) in self.targets.iter_mut().zip(health.into_iter().flatten()) {
            view.healthy = Some(h.healthy && !h.ejected);
            view.ejected = Some(h.ejected);
        }
        self
    }
}

/// An organisation as the admin API shows it (never its sealed payer key).
#[derive(Debug, Serialize, ToSchema)]
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
    /// `null`: the configured default (`[mcp] daily_spend_cap_usd`).
    #[serde(rename = "mcpDailyCapUSD")]
    #[schema(required, value_type = Option<f64>)]
    mcp_daily_cap_usd: Option<Box<serde_json::value::RawValue>>,
    /// `null`: the configured default (`[payout] platform_fee_bps`).
    #[schema(required)]
    platform_fee_bps: Option<u32>,
    created_at: String,
    updated_at: String,
}

impl From<&Org> for OrgView {
    fn from(o: &Org) -> Self {
        Self {
            id: o.id.clone(),
            slug: o.slug.clone(),
            name: o.name.clone(),
            receiver_wallet: o.receiver_wallet.map(|a| a.to_checksum(None)),
            plan: o.plan.clone(),
            suspended: o.suspended,
            payer_wallet: o.payer_wallet.map(|a| a.to_checksum(None)),
            mcp_daily_cap_usd: o.mcp_daily_cap.map(|c| c.to_usd_json()),
            platform_fee_bps: o.platform_fee_bps,
            created_at: o.created_at.clone(),
            updated_at: o.updated_at.clone(),
        }
    }
}

/// The new organisation and its first API key (shown only here).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrgCreated {
    #[serde(flatten)]
    pub org: OrgView,
    pub api_key: String,
    pub key_id: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyCreated {
    pub key_id: String,
    /// The key itself: shown only in this answer, stored only as its SHA-256.
    pub api_key: String,
    pub created_at: String,
    pub role: paygate_domain::model::KeyRole,
    #[schema(required)]
    pub expires_at: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(as = ApiKey)]
#[serde(rename_all = "camelCase")]
pub struct KeyView {
    key_id: String,
    created_at: String,
    #[schema(required)]
    revoked_at: Option<String>,
    /// What the key may do: `read`, `routes`, `payouts` or `full`.
    role: paygate_domain::model::KeyRole,
    /// When it stops working (null: never).
    #[schema(required)]
    expires_at: Option<String>,
}

impl From<&ApiKeyRecord> for KeyView {
    fn from(k: &ApiKeyRecord) -> Self {
        Self {
            key_id: k.key_id.clone(),
            created_at: k.created_at.clone(),
            revoked_at: k.revoked_at.clone(),
            role: k.role,
            expires_at: k.expires_at.clone(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    pub status: &'static str,
    pub version: &'static str,
    /// The cluster duties this node does now (the leases it holds, such as
    /// `payment-reconciliation`); on a single node, every duty once it has run.
    pub duties: Vec<String>,
    /// The live nodes sharing the rate limits (this one included; 1 on a single node): each
    /// enforces its share of every limit.
    pub limit_nodes: usize,
}

/// A page of the x402 bazaar discovery list.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveryPage {
    pub x402_version: u8,
    pub items: Vec<DiscoveryItem>,
    pub pagination: Pagination,
}

/// One discoverable resource in the x402 v2 discovery ("bazaar") shape: a paid HTTP route
/// (`type: http`) or a public MCP tool (`type: mcp`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveryItem {
    /// The route's URL; for an MCP tool, its endpoint's URL with `#` and the tool's name.
    pub resource: String,
    /// `http` or `mcp`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub x402_version: u8,
    /// x402 v2 payment requirements.
    #[schema(value_type = Vec<Object>)]
    pub accepts: Vec<paygate_x402::v2::PaymentRequirementsV2>,
    pub last_updated: String,
    pub description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// The organisation's slug.
    pub service_name: String,
    /// The route's bazaar category, if any (`sandbox` for the sandbox route).
    pub tags: Vec<String>,
    /// `{bazaar: {info, schema}}`: how to call it (input and output schemas).
    #[schema(value_type = Object)]
    pub extensions: serde_json::Value,
    pub metadata: DiscoveryMetadata,
}

/// paygate's own fields of an item (kept from the v1 listing).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveryMetadata {
    #[schema(required)]
    pub category: Option<String>,
    pub description: String,
    /// The organisation's slug.
    pub org: String,
    pub network_caip2: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Pagination {
    pub limit: usize,
    pub offset: usize,
    pub total: usize,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct OrgMetrics {
    pub metrics: MetricsWindow,
    /// Every route's figures over the window's hours or days, most revenue first.
    pub routes: Vec<crate::revenue::RouteRevenue>,
    pub series: crate::revenue::Series,
    pub facilitator: FacilitatorHealthView,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricsWindow {
    pub window: &'static str,
    pub org_id: String,
    pub total_requests: u64,
    #[serde(rename = "unpaid402")]
    pub unpaid_402: u64,
    pub paid: u64,
    /// `paid` by the protocol the payments came in.
    pub paid_by_protocol: PaidByProtocol,
    pub errors: u64,
    #[schema(required)]
    pub avg_challenge_ms: Option<f64>,
    #[schema(required)]
    pub avg_settle_ms: Option<f64>,
    pub error_rate: f64,
    /// USDC received over the window net of the refunds made in it, six decimals.
    #[serde(rename = "revenueUSDC")]
    #[schema(rename = "revenueUSDC")]
    pub revenue_usdc: String,
    /// USDC refunded to payers over the window (counted in `revenueUSDC` already).
    #[serde(rename = "refundedUSDC")]
    #[schema(rename = "refundedUSDC")]
    pub refunded_usdc: String,
}

/// Paid requests by the protocol they came in.
#[derive(Debug, Serialize, ToSchema)]
pub struct PaidByProtocol {
    pub x402: u64,
    pub mpp: u64,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(as = FacilitatorHealth)]
#[serde(rename_all = "camelCase")]
pub struct FacilitatorHealthView {
    /// `up`, `degraded`, `down` or `unknown`.
    pub status: &'static str,
    pub latency_ms: u64,
    pub checked_at: String,
    pub facilitator_url: String,
    /// When a network lists several facilitators (tried in order, failing over): each one,
    /// whether it answers now and how many settlements it made since this node started.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub facilitators: Vec<FacilitatorMemberView>,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(as = FacilitatorMember)]
#[serde(rename_all = "camelCase")]
pub struct FacilitatorMemberView {
    pub network: String,
    /// `embedded:<network>` or the facilitator's URL (without credentials).
    pub url: String,
    /// Its fee per settlement in USD, as configured (empty: none given).
    pub fee: String,
    pub healthy: bool,
    pub settled: u64,
}

/// What a provider webhook did.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookAck {
    /// `applied`, `ignored`, `duplicate` or `kept`.
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payment_status: Option<&'static str>,
}
