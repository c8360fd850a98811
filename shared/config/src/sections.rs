//! The configuration's sections, each with its defaults (what `conf/paygate.toml` documents).

use alloy_primitives::Address;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::edge::TlsConfig;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// The public listener (Pingora): `/gateway/*` and everything else.
    pub listen: SocketAddr,
    /// Absolute base URL used for challenge `resource` URLs; empty means `http://{listen}`.
    pub public_base_url: String,
    /// Internal loopback address of the control plane; port 0 picks a free one.
    pub control_plane_listen: SocketAddr,
    /// Worker threads of the proxy service.
    pub threads: usize,
    /// Let idle proxy threads steal work from busy ones (one multi-thread runtime) instead of
    /// one single-thread runtime per thread; the latter avoids cross-thread wake-ups.
    pub work_stealing: bool,
    /// Seconds in-flight requests get to finish after SIGTERM or a hand-over: the listener
    /// stops accepting at once, and Pingora waits this whole period before stopping the
    /// runtimes (which cuts what still runs).
    pub grace_period_seconds: u64,
    /// Seconds the runtimes then get to stop.
    pub graceful_shutdown_timeout_seconds: u64,
    /// Largest request body the control plane accepts, in bytes.
    pub max_body_bytes: usize,
    /// Cleartext HTTP/2 (prior knowledge, "h2c") on the plain listener, beside HTTP/1.1.
    pub h2c: bool,
    /// Idle upstream connections kept for reuse, across all upstreams (Pingora's
    /// `upstream_keepalive_pool_size`, 128 by default there): with more requests in flight than
    /// this, every request beyond it opens and closes an upstream connection.
    pub upstream_keepalive_pool_size: usize,
    /// The TLS listener (off unless `listen` is set).
    pub tls: TlsConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8402)),
            public_base_url: String::new(),
            control_plane_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            threads: 2,
            work_stealing: false,
            grace_period_seconds: 5,
            graceful_shutdown_timeout_seconds: 5,
            max_body_bytes: 1 << 20,
            h2c: false,
            upstream_keepalive_pool_size: 1024,
            tls: TlsConfig {
                h2: true,
                reload_check_seconds: 10,
                ..TlsConfig::default()
            },
        }
    }
}

impl ServerConfig {
    /// The public base URL without a trailing slash.
    /// The public listener as this process reaches it (an unspecified address means loopback):
    /// where MCP tool calls and the sandbox provider's webhooks go.
    pub fn local_addr(&self) -> SocketAddr {
        let ip = match self.listen.ip() {
            std::net::IpAddr::V4(v4) if v4.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::IpAddr::V6(v6) if v6.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
            ip => ip,
        };
        SocketAddr::new(ip, self.listen.port())
    }

    /// The public base URL: as configured, else the TLS listener's (when there is one), else
    /// the plain listener's.
    pub fn public_base_url(&self) -> String {
        if self.public_base_url.trim().is_empty() {
            if self.tls.enabled() {
                return format!("https://{}", self.tls.listen.trim());
            }
            format!("http://{}", self.listen)
        } else {
            self.public_base_url
                .trim()
                .trim_end_matches('/')
                .to_string()
        }
    }
}

/// Where records are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StorageBackend {
    /// Embedded, one node (the default).
    Sled,
    /// A cluster of nodes sharing one PostgreSQL database.
    Postgres,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    pub backend: StorageBackend,
    /// The node's own directory: the sled database, and for every backend the pid file, the
    /// `paygate.addr` file and the sandbox provider's database.
    pub path: PathBuf,
    /// sled's page cache in MiB (sled's own default is 1 GiB). sled counts it in on-disk bytes,
    /// so the memory it takes is a few times this; and sled keeps some memory per stored record
    /// beyond it (RELIABILITY.md, soak).
    pub cache_capacity_mb: u64,
    /// sled: how often the voucher journal is synced to disk, in milliseconds. A voucher's
    /// charge is in the journal (the kernel's page cache) before its answer, so a crash of the
    /// process loses none; a power loss loses at most this long's charges. 0: no journal, each
    /// voucher's answer waits for a flush of sled's log (far more CPU a voucher).
    pub voucher_sync_ms: u64,
    /// Environment variable holding the PostgreSQL URL (a credential: never in the file).
    pub database_url_env: String,
    /// Connections in the node's PostgreSQL pool.
    pub pool_size: u32,
    /// PostgreSQL `statement_timeout` for every statement, in milliseconds.
    pub statement_timeout_ms: u64,
    /// PostgreSQL: seconds between full rereads of the route table (other nodes' changes
    /// arrive at once by notification; this heals a lost one).
    pub resync_interval_seconds: u64,
}

impl StorageConfig {
    pub const DEFAULT_CACHE_CAPACITY_MB: u64 = paygate_domain::SLED_CACHE_CAPACITY_MB;
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            backend: StorageBackend::Sled,
            path: PathBuf::from("./data"),
            cache_capacity_mb: Self::DEFAULT_CACHE_CAPACITY_MB,
            voucher_sync_ms: paygate_domain::VOUCHER_SYNC_MS,
            database_url_env: "PAYGATE_DATABASE_URL".into(),
            pool_size: 16,
            statement_timeout_ms: 5000,
            resync_interval_seconds: 30,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Name of the environment variable holding the admin token. Unset variable = admin API off.
    pub admin_token_env: String,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            admin_token_env: "PAYGATE_ADMIN_TOKEN".into(),
        }
    }
}

impl AdminConfig {
    /// The admin token from the environment, if set and non-empty.
    pub fn token(&self) -> Option<String> {
        std::env::var(&self.admin_token_env)
            .ok()
            .filter(|t| !t.trim().is_empty())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct X402Config {
    /// `maxTimeoutSeconds` offered in challenges.
    pub max_timeout_seconds: u64,
    /// `payTo` of the public sandbox route `demo/demo` (never settled; a burn address by default).
    pub demo_pay_to: Address,
    /// Price of the sandbox route, in USD (decimal string).
    pub demo_price_usd: String,
}

impl Default for X402Config {
    fn default() -> Self {
        Self {
            max_timeout_seconds: 60,
            demo_pay_to: "0x000000000000000000000000000000000000dEaD"
                .parse()
                .expect("valid address literal"),
            demo_price_usd: "0.01".into(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OrgsConfig {
    /// Plan given to organisations created without one.
    pub default_plan: String,
    /// Environment variable with the master key (64 hex characters) that seals payer wallet
    /// keys at rest. Unset: payer wallets cannot be stored.
    pub master_key_env: String,
}

impl Default for OrgsConfig {
    fn default() -> Self {
        Self {
            default_plan: "free".into(),
            master_key_env: "PAYGATE_MASTER_KEY".into(),
        }
    }
}

/// MCP over SSE / Streamable HTTP: an organisation's routes as tools paid from its payer wallet.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// What an organisation's MCP tool calls may spend per UTC day, in USD (decimal string),
    /// unless the admin API sets a cap for that organisation.
    pub daily_spend_cap_usd: String,
    /// Seconds between keep-alive comments on an idle MCP event stream.
    pub keep_alive_seconds: u64,
    /// Open legacy SSE sessions allowed per organisation; more answer `429`.
    pub max_sessions_per_org: usize,
    /// Seconds a tool call may take end to end (payment, settlement and upstream).
    pub tool_timeout_seconds: u64,
    /// Largest upstream answer returned as a tool result, in bytes; longer ones are cut.
    pub max_result_bytes: usize,
    /// Browser origins (`https://app.example.com:443`, `http://localhost:*`) allowed to call the
    /// Streamable HTTP endpoint besides the gateway's own public URL; a request with any other
    /// `Origin` is refused `403` (DNS rebinding). Requests without `Origin` (non-browser
    /// clients) are not affected.
    pub allowed_origins: Vec<String>,
}

impl Default for McpConfig {
    fn default() -> Self {
        Self {
            daily_spend_cap_usd: "10".into(),
            keep_alive_seconds: 15,
            max_sessions_per_org: 32,
            tool_timeout_seconds: 120,
            max_result_bytes: 1 << 20,
            allowed_origins: Vec::new(),
        }
    }
}

impl McpConfig {
    /// The default daily cap (validated at load).
    pub fn daily_cap(&self) -> paygate_x402::money::UsdcAmount {
        paygate_x402::money::UsdcAmount::from_usd_str(&self.daily_spend_cap_usd).unwrap_or_default()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PlanConfig {
    /// Paid-route requests an organisation may serve per calendar month (UTC).
    pub monthly_requests: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IdempotencyConfig {
    /// How long an `Idempotency-Key` is remembered, in hours (at least 24).
    pub ttl_hours: u64,
}

impl Default for IdempotencyConfig {
    fn default() -> Self {
        Self { ttl_hours: 24 }
    }
}

/// Which facilitator verifies and settles payments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FacilitatorKind {
    /// Settle on-chain ourselves through each network's `rpc_url` with a relayer key.
    Embedded,
    /// Call a facilitator over the standard HTTP API at `url`.
    Remote,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FacilitatorConfig {
    pub kind: FacilitatorKind,
    /// Base URL of a remote facilitator (kind = "remote").
    pub url: String,
    /// Environment variable holding a bearer token for the remote facilitator (empty = none).
    pub bearer_token_env: String,
    /// Environment variable holding the relayer's private key (kind = "embedded").
    pub relayer_key_env: String,
    /// Seconds to wait for a settlement's receipt before the outcome is "unknown".
    pub settle_timeout_seconds: u64,
    /// Seconds for any other facilitator or RPC call.
    pub request_timeout_seconds: u64,
    /// Seconds between reconciliation passes over payments whose outcome is not recorded (one
    /// pass also runs at start).
    pub reconcile_interval_seconds: u64,
    /// The deployment's on-chain identity for `auth-capture` (the escrow's operator) and `upto`
    /// (the facilitator its authorizations name): a `PaygateOperator` contract
    /// (`shared/contracts`) that forwards calls from any of the deployment's relayers, so every
    /// node of a cluster can capture, void, refund and reconcile any hold and settle any `upto`
    /// payment. Unset: the node's own relayer (one node).
    pub operator: Option<Address>,
    /// The receiver refund collector (`ReceiverRefundCollector`, `shared/contracts`) through
    /// which a seller's wallet funds its `auth-capture` refunds, once it approved it. Unset:
    /// the dev chain's (`0x5e11e7…ef0d`).
    pub refund_collector: Option<Address>,
    /// Seconds an `auth-capture` request may hold its payment in escrow while the origin
    /// answers, before reconciliation (on any node) takes the hold as left behind and voids it:
    /// a node killed between hold and capture leaves the payer's money held this long. Longer
    /// than the slowest origin's answer head (a capture after it fails, and the answer is
    /// refused, nothing charged).
    pub live_hold_seconds: u64,
    /// How long an MPP challenge may be paid after its `402` (its `expires`): the payer's
    /// authorization is valid until then. At least 10 s (a payment is settled only with 6 s
    /// left).
    pub mpp_challenge_seconds: u64,
}

impl FacilitatorConfig {
    /// How long a request may still be settling a payment (or sending a refund) it took: the
    /// settle timeout and two RPC timeouts, with 5 s of margin. Reconciliation leaves this
    /// process's younger payments to their requests; a younger pending refund is its request's.
    pub fn in_flight(&self) -> std::time::Duration {
        std::time::Duration::from_secs(
            self.settle_timeout_seconds
                .saturating_add(self.request_timeout_seconds.saturating_mul(2))
                .saturating_add(5),
        )
    }
}

impl Default for FacilitatorConfig {
    fn default() -> Self {
        Self {
            kind: FacilitatorKind::Embedded,
            url: String::new(),
            bearer_token_env: String::new(),
            relayer_key_env: "PAYGATE_RELAYER_KEY".into(),
            settle_timeout_seconds: 30,
            request_timeout_seconds: 10,
            reconcile_interval_seconds: 30,
            operator: None,
            refund_collector: None,
            live_hold_seconds: 300,
            mpp_challenge_seconds: 300,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Seconds to open a connection (TCP + TLS) to an upstream.
    pub connect_timeout_seconds: u64,
    /// Non-streaming routes: seconds for the whole upstream response.
    pub total_timeout_seconds: u64,
    /// Streaming routes: seconds without a byte from the upstream before giving up (no total).
    pub stream_idle_timeout_seconds: u64,
    /// Networks an upstream may resolve to although they are loopback, private, link-local or
    /// metadata addresses (refused by default, against SSRF), e.g. `["127.0.0.0/8"]` in
    /// development.
    pub allow_private_networks: Vec<ipnet::IpNet>,
    /// Upstream hosts whose TLS certificate is not verified (development only).
    pub insecure_tls_hosts: Vec<String>,
    /// Upstream hosts spoken to in HTTP/2: over TLS offered first by ALPN (HTTP/1.1 remains the
    /// fallback), in cleartext as h2c with prior knowledge. HTTP/2 carries response trailers
    /// (Pingora 0.9 drops an HTTP/1.1 origin's), so a usage-priced streamed route whose origin
    /// states its charge in a trailer needs its host here.
    pub http2_hosts: Vec<String>,
    /// Largest request body forwarded to an upstream, in bytes.
    pub max_request_body_bytes: u64,
    /// Largest request header block accepted on the public listener, in bytes.
    pub max_request_header_bytes: usize,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self {
            connect_timeout_seconds: 5,
            total_timeout_seconds: 30,
            stream_idle_timeout_seconds: 60,
            allow_private_networks: Vec::new(),
            insecure_tls_hosts: Vec::new(),
            http2_hosts: Vec::new(),
            max_request_body_bytes: 10 << 20,
            max_request_header_bytes: 32 << 10,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Seconds between facilitator health probes.
    pub probe_interval_seconds: u64,
    /// A probe slower than this many milliseconds reports the facilitator `degraded`.
    pub degraded_latency_ms: u64,
    /// Seconds between writes of the per-org request counters to the store.
    pub flush_interval_seconds: u64,
    /// Environment variable holding the token `/metrics` requires (the admin token works too).
    pub scrape_token_env: String,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            probe_interval_seconds: 15,
            degraded_latency_ms: 1000,
            flush_interval_seconds: 10,
            scrape_token_env: "PAYGATE_METRICS_TOKEN".into(),
        }
    }
}

/// Seller webhooks: how deliveries are attempted.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhooksConfig {
    /// Seconds an endpoint has to answer one attempt.
    pub timeout_seconds: u64,
    /// Seconds before each retry after a failed attempt, in order; once they are used up the
    /// delivery is `FAILED` (a replay sends it again).
    pub retry_seconds: Vec<u64>,
    /// Seconds a rotated secret keeps signing beside the new one.
    pub secret_overlap_seconds: u64,
    /// Milliseconds between the dispatcher's looks at the queue.
    pub poll_interval_ms: u64,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        Self {
            timeout_seconds: 10,
            // About three days in all, as Standard Webhooks suggests.
            retry_seconds: vec![5, 300, 1800, 7200, 18000, 36000, 36000, 36000, 36000, 36000],
            secret_overlap_seconds: 86400,
            poll_interval_ms: 500,
        }
    }
}

/// Traces over OTLP (OpenTelemetry): one span per paid request with its verification,
/// settlement, store writes and upstream call as children. Off while `otlp_endpoint` is empty.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP base URL (`http://127.0.0.1:4318`); spans go to
    /// `{otlp_endpoint}/v1/traces`. Empty: no traces.
    pub otlp_endpoint: String,
    /// The share of traces kept (0 to 1) when the caller's `traceparent` does not decide.
    pub sample_ratio: f64,
    /// The `service.name` the spans carry.
    pub service_name: String,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: String::new(),
            sample_ratio: 1.0,
            service_name: "paygate".into(),
        }
    }
}

/// Payment channels (x402 `batch-settlement`): the channel terms routes offer and when the
/// claimer claims what vouchers promised.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChannelsConfig {
    /// The `withdrawDelay` routes offer: how long a payer waits between asking for its money
    /// back and taking it, so the claimer can claim first (900 s to 30 days).
    pub withdraw_delay_seconds: u64,
    /// Environment variable with the receiver authorizer's private key (hex), the key that
    /// signs claims and cooperative refunds. Unset or empty: derived from the master key.
    pub receiver_authorizer_key_env: String,
    /// A channel is claimed once its unclaimed amount reaches this many USDC base units...
    pub claim_min_base_units: u64,
    /// ...or once its oldest unclaimed charge is this old.
    pub claim_max_age_seconds: u64,
    /// How often the elected claimer looks at the channels.
    pub claim_interval_seconds: u64,
    /// Most channels in one claim transaction.
    pub claim_batch_max: usize,
    /// A voucher is refused when the channel's withdrawal finishes within this many seconds
    /// (a claim must land first).
    pub claim_lead_seconds: u64,
    /// How long a node keeps a channel after its last voucher before another node may take
    /// it (a cluster's hand-over; renewed by every voucher's write).
    pub lease_ms: u64,
}

impl Default for ChannelsConfig {
    fn default() -> Self {
        Self {
            withdraw_delay_seconds: 86_400,
            receiver_authorizer_key_env: "PAYGATE_RECEIVER_AUTHORIZER_KEY".into(),
            claim_min_base_units: 1_000_000,
            claim_max_age_seconds: 3_600,
            claim_interval_seconds: 10,
            claim_batch_max: 200,
            claim_lead_seconds: 300,
            lease_ms: 2_000,
        }
    }
}

impl ChannelsConfig {
    pub(crate) fn validate(&self) -> Result<(), String> {
        if !(900..=2_592_000).contains(&self.withdraw_delay_seconds) {
            return Err("channels.withdraw_delay_seconds must be between 900 and 2592000".into());
        }
        if self.claim_lead_seconds >= self.withdraw_delay_seconds {
            return Err("channels.claim_lead_seconds must be below withdraw_delay_seconds".into());
        }
        if self.claim_interval_seconds == 0 || self.claim_batch_max == 0 || self.lease_ms < 100 {
            return Err("channels: claim_interval_seconds and claim_batch_max must be at least 1, lease_ms at least 100".into());
        }
        Ok(())
    }
}
