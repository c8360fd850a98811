//! Configuration: embedded defaults, then the TOML file, then `PAYGATE__SECTION__KEY` environment
//! variables (the environment wins). Secrets are never in the file: it names environment variables.

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use paygate_x402::network::{builtin_networks, NetworkConfig};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

mod edge;
mod payout;
mod sections;
pub use edge::*;
pub use payout::*;
pub use sections::*;

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub storage: StorageConfig,
    pub admin: AdminConfig,
    pub x402: X402Config,
    pub orgs: OrgsConfig,
    pub plans: BTreeMap<String, PlanConfig>,
    pub networks: BTreeMap<String, NetworkConfig>,
    pub idempotency: IdempotencyConfig,
    pub facilitator: FacilitatorConfig,
    pub upstream: UpstreamConfig,
    pub limits: LimitsConfig,
    pub metrics: MetricsConfig,
    pub mcp: McpConfig,
    pub payout: PayoutConfig,
    pub channels: ChannelsConfig,
    pub telemetry: TelemetryConfig,
    pub webhooks: WebhooksConfig,
}

fn builtin_plans() -> BTreeMap<String, PlanConfig> {
    [
        ("free", 10_000u64),
        ("pro", 1_000_000),
        ("enterprise", 100_000_000),
    ]
    .into_iter()
    .map(|(n, m)| {
        (
            n.to_string(),
            PlanConfig {
                monthly_requests: m,
            },
        )
    })
    .collect()
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration: {0}")]
    Parse(#[from] Box<figment::Error>),
    #[error("configuration: {0}")]
    Invalid(String),
}

impl Config {
    /// Each network's `facilitators`: `"embedded"` or an http(s) URL, each once, at most 8; a
    /// fee in USD when given.
    fn validate_facilitator_lists(&self) -> Result<(), ConfigError> {
        for (name, n) in &self.networks {
            let bad = |m: String| {
                Err(ConfigError::Invalid(format!(
                    "networks.{name}.facilitators: {m}"
                )))
            };
            if n.facilitators.len() > 8 {
                return bad("at most 8".into());
            }
            for (i, f) in n.facilitators.iter().enumerate() {
                let url = f.url.trim();
                if url != "embedded" && !url.starts_with("http://") && !url.starts_with("https://")
                {
                    return bad(format!(
                        "url {url:?} is neither \"embedded\" nor an http(s) URL"
                    ));
                }
                if n.facilitators[..i].iter().any(|g| g.url.trim() == url) {
                    return bad(format!("{url:?} is listed twice"));
                }
                let fee_ok = f.fee.is_empty()
                    || rust_decimal::Decimal::from_str_exact(&f.fee)
                        .is_ok_and(|d| d >= rust_decimal::Decimal::ZERO);
                if !fee_ok {
                    return bad(format!("fee {:?} is not a USD amount", f.fee));
                }
            }
        }
        Ok(())
    }

    /// Each network's `tokens`: sane decimals and addresses, symbols other than USDC (the
    /// network's own `asset`), no address twice.
    fn validate_tokens(&self) -> Result<(), ConfigError> {
        for (name, n) in &self.networks {
            for (symbol, t) in &n.tokens {
                let bad = |m: &str| {
                    Err(ConfigError::Invalid(format!(
                        "networks.{name}.tokens.{symbol}: {m}"
                    )))
                };
                if symbol.eq_ignore_ascii_case(paygate_x402::network::USDC)
                    || symbol.is_empty()
                    || symbol.len() > 16
                {
                    return bad("the symbol must be 1 to 16 characters, once, not USDC (the network's asset)");
                }
                if let Some(m) = t.problem() {
                    return bad(m);
                }
                let twice = t.address == n.asset
                    || n.tokens
                        .iter()
                        .any(|(s, u)| !s.eq_ignore_ascii_case(symbol) && u.address == t.address)
                    || n.tokens
                        .keys()
                        .filter(|s| s.eq_ignore_ascii_case(symbol))
                        .count()
                        > 1;
                if twice {
                    return bad("its address is another token's");
                }
            }
        }
        Ok(())
    }

    fn validate_payout(&self) -> Result<(), ConfigError> {
        let p = &self.payout;
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if !paygate_payouts::money::PLATFORM_FEE_BPS.contains(&p.platform_fee_bps) {
            return bad("payout.platform_fee_bps must be between 25 and 65".into());
        }
        match p.provider.as_str() {
            "sandbox" | "cpn" => {}
            "http" if p.provider_url.starts_with("http") => {}
            "http" => return bad("payout.provider_url must be an http(s) URL".into()),
            other => {
                return bad(format!(
                    "payout.provider {other:?} is not sandbox, http or cpn"
                ))
            }
        }
        if !matches!(p.sandbox.webhook_signing.as_str(), "hmac" | "circle") {
            return bad("payout.sandbox.webhook_signing must be hmac or circle".into());
        }
        if !p.sandbox.funding_address.is_empty()
            && p.sandbox
                .funding_address
                .parse::<alloy_primitives::Address>()
                .is_err()
        {
            return bad("payout.sandbox.funding_address must be an address (0x and 40 hex)".into());
        }
        if !p.funding_network.is_empty() && !self.networks.contains_key(&p.funding_network) {
            return bad(format!(
                "payout.funding_network {:?} is not one of networks",
                p.funding_network
            ));
        }
        if !p.cpn.base_url.is_empty() && !p.cpn.base_url.starts_with("http") {
            return bad("payout.cpn.base_url must be an http(s) URL".into());
        }
        let chain = &p.cpn.blockchain;
        if chain.is_empty()
            || chain.len() > 32
            || !chain
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '-')
        {
            return bad(
                "payout.cpn.blockchain must be a CPN chain name such as ETH-SEPOLIA".into(),
            );
        }
        for c in paygate_payouts::Currency::ALL {
            let rate = p.sandbox.rates.get(c.code()).map(|r| {
                rust_decimal::Decimal::from_str_exact(r)
                    .ok()
                    .filter(|d| *d > rust_decimal::Decimal::ZERO)
            });
            if !matches!(rate, Some(Some(_))) {
                return bad(format!(
                    "payout.sandbox.rates.{c} must be a positive decimal"
                ));
            }
            let fee = p
                .sandbox
                .rail_fees_usd
                .get(c.code())
                .map(|f| f == "0" || paygate_payouts::money::parse_amount(f).is_ok());
            if fee != Some(true) {
                return bad(format!(
                    "payout.sandbox.rail_fees_usd.{c} must be a decimal"
                ));
            }
        }
        if p.sandbox.spread_bps >= 10_000 || p.quote_ttl_seconds == 0 {
            return bad("payout.sandbox.spread_bps must be < 10000, quote_ttl_seconds >= 1".into());
        }
        Ok(())
    }

    /// The embedded defaults, including the built-in networks and plans.
    pub fn embedded() -> Self {
        Self {
            plans: builtin_plans(),
            networks: builtin_networks(),
            ..Self::default()
        }
    }

    /// Loads defaults, then `file` (if given), then the `PAYGATE__*` environment.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        let mut fig = Figment::from(Serialized::defaults(Self::embedded()));
        if let Some(f) = file {
            if !f.exists() {
                return Err(ConfigError::Invalid(format!(
                    "config file {} does not exist",
                    f.display()
                )));
            }
            fig = fig.merge(Toml::file(f));
        }
        fig = fig.merge(Env::prefixed("PAYGATE__").split("__"));
        let cfg: Self = fig.extract().map_err(Box::new)?;
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if !self.plans.contains_key(&self.orgs.default_plan) {
            return Err(ConfigError::Invalid(format!(
                "orgs.default_plan {:?} is not a configured plan",
                self.orgs.default_plan
            )));
        }
        if !self.networks.contains_key("base-sepolia") {
            return Err(ConfigError::Invalid(
                "networks.base-sepolia is required (the sandbox route uses it)".into(),
            ));
        }
        self.validate_facilitator_lists()?;
        let t = &self.telemetry;
        if !(0.0..=1.0).contains(&t.sample_ratio) {
            return Err(ConfigError::Invalid(
                "telemetry.sample_ratio must be between 0 and 1".into(),
            ));
        }
        let endpoint = t.otlp_endpoint.trim();
        if !endpoint.is_empty()
            && !endpoint.starts_with("http://")
            && !endpoint.starts_with("https://")
        {
            return Err(ConfigError::Invalid(
                "telemetry.otlp_endpoint must be an http(s) URL (OTLP over HTTP) or empty".into(),
            ));
        }
        self.validate_tokens()?;
        if self.idempotency.ttl_hours < 24 {
            return Err(ConfigError::Invalid(
                "idempotency.ttl_hours must be at least 24".into(),
            ));
        }
        if self.storage.voucher_sync_ms > 10_000 {
            return Err(ConfigError::Invalid(
                "storage.voucher_sync_ms must be at most 10000 (0: a flush per voucher)".into(),
            ));
        }
        if self.server.threads == 0 {
            return Err(ConfigError::Invalid(
                "server.threads must be at least 1".into(),
            ));
        }
        paygate_x402::money::UsdcAmount::from_usd_str(&self.x402.demo_price_usd)
            .map_err(|e| ConfigError::Invalid(format!("x402.demo_price_usd {e}")))?;
        paygate_x402::money::UsdcAmount::from_usd_str(&self.mcp.daily_spend_cap_usd)
            .map_err(|e| ConfigError::Invalid(format!("mcp.daily_spend_cap_usd {e}")))?;
        self.validate_payout()?;
        self.limits.validate().map_err(ConfigError::Invalid)?;
        self.channels.validate().map_err(ConfigError::Invalid)?;
        self.server.tls.validate().map_err(ConfigError::Invalid)?;
        if self.mcp.keep_alive_seconds == 0 || self.mcp.tool_timeout_seconds == 0 {
            return Err(ConfigError::Invalid(
                "mcp.keep_alive_seconds and mcp.tool_timeout_seconds must be at least 1".into(),
            ));
        }
        let base = self.server.public_base_url();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ConfigError::Invalid(
                "server.public_base_url must start with http:// or https://".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unspecified_listen_addresses_are_reached_on_loopback() {
        let mut s = ServerConfig {
            listen: "0.0.0.0:8402".parse().unwrap(),
            ..ServerConfig::default()
        };
        assert_eq!(s.local_addr(), "127.0.0.1:8402".parse().unwrap());
        s.listen = "[::]:9".parse().unwrap();
        assert_eq!(s.local_addr(), "[::1]:9".parse().unwrap());
        s.listen = "10.1.2.3:80".parse().unwrap();
        assert_eq!(s.local_addr(), s.listen);
    }

    #[test]
    fn embedded_defaults_are_valid() {
        let c = Config::embedded();
        c.validate().unwrap();
        assert_eq!(c.server.listen.to_string(), "127.0.0.1:8402");
        assert_eq!(c.server.public_base_url(), "http://127.0.0.1:8402");
        assert_eq!(c.admin.admin_token_env, "PAYGATE_ADMIN_TOKEN");
    }

    #[test]
    fn documented_config_file_matches_embedded_defaults() {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../conf/paygate.toml");
        let from_file = Config::load(Some(&file)).unwrap();
        let a = serde_json::to_value(&from_file).unwrap();
        let b = serde_json::to_value(Config::embedded()).unwrap();
        assert_eq!(
            a, b,
            "conf/paygate.toml must document the embedded defaults"
        );
    }

    #[test]
    fn unknown_keys_and_missing_file_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(&f, "[server]\nlisen = \"127.0.0.1:9000\"\n").unwrap();
        assert!(Config::load(Some(&f)).is_err());
        assert!(Config::load(Some(&dir.path().join("nope.toml"))).is_err());
    }

    #[test]
    fn a_networks_facilitator_list_is_checked() {
        use paygate_x402::network::FacilitatorEntry;
        let entry = |url: &str, fee: &str| FacilitatorEntry {
            url: url.into(),
            auth_header_env: String::new(),
            fee: fee.into(),
        };
        let mut c = Config::embedded();
        let list = vec![
            entry("https://x402.example/facilitator", "0.001"),
            entry("embedded", ""),
        ];
        c.networks.get_mut("base-sepolia").unwrap().facilitators = list.clone();
        c.validate().unwrap();
        for bad in [
            vec![entry("ftp://x", "")],
            vec![entry("embedded", ""), entry("embedded", "")],
            vec![entry("embedded", "-1")],
            vec![entry("embedded", "abc")],
            vec![entry("embedded", ""); 9],
        ] {
            c.networks.get_mut("base-sepolia").unwrap().facilitators = bad.clone();
            assert!(c.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_cpn_provider_and_its_chain_name_are_checked() {
        let mut c = Config::embedded();
        c.payout.provider = "cpn".into();
        c.validate().unwrap();
        assert!(c.payout.builtin_sandbox(), "no base URL: the simulator");
        assert_eq!(c.payout.sandbox_settings().webhook_signing, "circle");
        c.payout.cpn.base_url = "https://api.circle.com".into();
        assert!(!c.payout.builtin_sandbox());
        for bad in ["", "eth sepolia", "ETH/SEPOLIA", &"X".repeat(33)] {
            c.payout.cpn.blockchain = bad.to_string();
            assert!(c.validate().is_err(), "{bad:?}");
        }
        c.payout.cpn.blockchain = "MATIC-AMOY".into();
        c.validate().unwrap();
        c.payout.provider = "circle".into();
        assert!(c.validate().is_err());
    }

    #[test]
    fn the_voucher_sync_interval_is_bounded() {
        let mut c = Config::embedded();
        assert_eq!(c.storage.voucher_sync_ms, 100);
        for ok in [0, 1, 10_000] {
            c.storage.voucher_sync_ms = ok;
            c.validate().unwrap();
        }
        c.storage.voucher_sync_ms = 10_001;
        assert!(c.validate().is_err());
    }
}
