//! The `[payout]` section: corridors, the payout provider (sandbox, an HTTP provider or Circle
//! Payments Network) and the built-in sandbox's own settings.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// Payout corridors and the payout provider.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PayoutConfig {
    /// `sandbox` (the built-in provider on its own loopback listener), `http` (a provider at
    /// `provider_url` speaking the same API) or `cpn` (Circle Payments Network's OFI API at
    /// `cpn.base_url`, its key from `PAYGATE_CPN_API_KEY`; with no `cpn.base_url`, the
    /// built-in sandbox speaking CPN's API and signing as CPN does: the provider simulator).
    pub provider: String,
    /// Base URL of an `http` provider.
    pub provider_url: String,
    /// Environment variable with the provider's API key (sent as a bearer token), if any.
    pub provider_api_key_env: String,
    /// Environment variable with the webhook secrets, comma-separated (the first signs the
    /// sandbox's webhooks; any verifies, for rotation). Unset with the sandbox: a random secret
    /// is made for the process; unset otherwise: every webhook is refused.
    pub webhook_secrets_env: String,
    /// Seconds a timestamped `Provider-Signature` may be away from now.
    pub webhook_tolerance_seconds: u64,
    /// Default platform fee in basis points (25 to 65; 50 = 0.50 %); per org via the admin API.
    pub platform_fee_bps: u32,
    /// Seconds a quote stays valid (at most the provider's own expiry).
    pub quote_ttl_seconds: u64,
    /// Seconds for one provider request.
    pub request_timeout_seconds: u64,
    /// Seconds between passes that finish payouts a crash or a provider outage left mid-way.
    pub reconcile_interval_seconds: u64,
    pub sandbox: SandboxConfig,
    pub cpn: CpnConfig,
    /// The network (a `networks` name) payouts are funded on from each organisation's payout
    /// wallet, when the provider's quote names an address to fund (the sandbox's
    /// `funding_address`). Empty: payouts move no USDC.
    pub funding_network: String,
}

/// Circle Payments Network: its API (`payout.provider = "cpn"`) and where its notification keys
/// are read (webhooks signed with `X-Circle-Signature` / `X-Circle-Key-Id` are verified with
/// them).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CpnConfig {
    /// The provider's API base URL, e.g. `https://api.circle.com`. Empty: ECDSA-signed webhooks
    /// are refused, unless the built-in sandbox signs that way (then its own listener).
    pub base_url: String,
    /// CPN's name of the chain payouts are funded on (quotes and payments name it).
    pub blockchain: String,
}

impl Default for CpnConfig {
    fn default() -> Self {
        Self {
            base_url: String::new(),
            blockchain: "ETH-SEPOLIA".into(),
        }
    }
}

impl Default for PayoutConfig {
    fn default() -> Self {
        Self {
            provider: "sandbox".into(),
            provider_url: String::new(),
            provider_api_key_env: "PAYGATE_PROVIDER_API_KEY".into(),
            webhook_secrets_env: "PAYGATE_WEBHOOK_SECRETS".into(),
            webhook_tolerance_seconds: 300,
            platform_fee_bps: 50,
            quote_ttl_seconds: 60,
            request_timeout_seconds: 10,
            reconcile_interval_seconds: 15,
            sandbox: SandboxConfig::default(),
            cpn: CpnConfig::default(),
            funding_network: String::new(),
        }
    }
}

impl PayoutConfig {
    /// Whether the built-in sandbox is the provider: `sandbox`, or `cpn` with no base URL (the
    /// sandbox then stands in for CPN).
    pub fn builtin_sandbox(&self) -> bool {
        self.provider == "sandbox" || (self.provider == "cpn" && self.cpn.base_url.is_empty())
    }

    /// The sandbox's settings as it runs: standing in for CPN, it signs as CPN does.
    pub fn sandbox_settings(&self) -> SandboxConfig {
        let mut s = self.sandbox.clone();
        if self.provider == "cpn" {
            s.webhook_signing = "circle".into();
        }
        s
    }
}

/// The built-in sandbox payout provider.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    /// Its own loopback listener; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Mid-market rates: destination units per USDC (decimal strings).
    pub rates: BTreeMap<String, String>,
    /// The spread taken off the mid rate, in basis points.
    pub spread_bps: u32,
    /// Rail fee per payout in USDC (decimal strings), per currency.
    pub rail_fees_usd: BTreeMap<String, String>,
    /// Seconds a sandbox quote is valid.
    pub quote_ttl_seconds: u64,
    /// Milliseconds from accepting a payout to its first webhook.
    pub webhook_delay_ms: u64,
    /// Milliseconds a compliance hold lasts before its final webhook.
    pub hold_release_ms: u64,
    /// First retry delay of an unacknowledged webhook (doubling up to `webhook_retry_max_ms`).
    pub webhook_retry_initial_ms: u64,
    pub webhook_retry_max_ms: u64,
    /// Milliseconds the sandbox waits before recording a new payout, and after recording it
    /// before answering: simulated provider latency (crash tests use them to stop paygate
    /// before and after the provider took the payout).
    pub accept_delay_ms: u64,
    pub answer_delay_ms: u64,
    /// The sandbox's own sled page cache in MiB (counted in on-disk bytes, like
    /// `storage.cache_capacity_mb`).
    pub cache_capacity_mb: u64,
    /// How its webhooks are signed: `hmac` (SPEC's `Provider-Signature` over its event payload)
    /// or `circle` (CPN notifications signed with ECDSA, `X-Circle-Signature` and
    /// `X-Circle-Key-Id`, its key served at `/v2/cpn/notifications/publicKey/{keyId}`).
    pub webhook_signing: String,
    /// The address its quotes ask the USDC to be sent to on chain; each payout is then accepted
    /// only once that transfer is on chain. Empty: it asks for no funding.
    pub funding_address: String,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        let table = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            rates: table(&[
                ("BRL", "5.45"),
                ("MXN", "17.13"),
                ("NGN", "1550.25"),
                ("KES", "129.50"),
                ("ZAR", "18.235"),
            ]),
            spread_bps: 100,
            rail_fees_usd: table(&[
                ("BRL", "0.30"),
                ("MXN", "0.40"),
                ("NGN", "0.75"),
                ("KES", "0.60"),
                ("ZAR", "0.50"),
            ]),
            quote_ttl_seconds: 120,
            webhook_delay_ms: 500,
            hold_release_ms: 1000,
            webhook_retry_initial_ms: 250,
            webhook_retry_max_ms: 30_000,
            accept_delay_ms: 0,
            answer_delay_ms: 0,
            cache_capacity_mb: 4,
            webhook_signing: "hmac".into(),
            funding_address: String::new(),
        }
    }
}
