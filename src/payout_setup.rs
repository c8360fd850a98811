//! The payout side of `paygate serve`: the payout provider's client from the configuration,
//! the webhook secrets, the built-in sandbox provider (its listener and its Pingora service) and
//! where CPN's signed webhooks find their keys. Used by `serve.rs`'s last start-up step.

use anyhow::Context;
use async_trait::async_trait;
use paygate_config::Config;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use std::sync::{Arc, Mutex};

/// The built-in sandbox payout provider (`payout.provider = "sandbox"`) on its own listener,
/// posting its webhooks to this gateway.
pub(crate) struct Sandbox {
    pub(crate) listener: Mutex<Option<std::net::TcpListener>>,
    pub(crate) config: Arc<Config>,
    pub(crate) secret: Vec<u8>,
    /// The chain it checks payouts' funding on, when payouts are funded.
    pub(crate) chain: Option<paygate_sandbox::FundingChain>,
}

#[async_trait]
impl BackgroundService for Sandbox {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let Some(listener) = self.listener.lock().ok().and_then(|mut l| l.take()) else {
            return;
        };
        let cfg = &self.config;
        let run = paygate_sandbox::serve(
            listener,
            cfg.payout.sandbox_settings(),
            cfg.storage.path.join("sandbox-provider"),
            format!("http://{}/webhooks/provider", cfg.server.local_addr()),
            self.secret.clone(),
            self.chain.clone(),
        );
        tokio::select! {
            r = run => if let Err(e) = r {
                tracing::error!(error = %e, "sandbox payout provider stopped");
            },
            _ = shutdown.changed() => {}
        }
    }
}

pub(crate) type Payouts = (
    Arc<dyn paygate_payouts::provider::PayoutProvider>,
    Vec<Vec<u8>>,
    Option<std::net::TcpListener>,
);

/// The payout provider's client, the webhook secrets and, for the built-in sandbox provider, its
/// bound listener (the control plane runs it).
pub(crate) fn build_payouts(cfg: &Config) -> anyhow::Result<Payouts> {
    use paygate_payouts::cpn_client::CpnProvider;
    use paygate_payouts::provider::HttpProvider;
    let p = &cfg.payout;
    let timeout = std::time::Duration::from_secs(p.request_timeout_seconds.max(1));
    let mut secrets = std::env::var(&p.webhook_secrets_env)
        .map(|v| paygate_payouts::webhook::parse_secrets(&v))
        .unwrap_or_default();
    let cpn_key = || {
        std::env::var("PAYGATE_CPN_API_KEY")
            .ok()
            .filter(|k| !k.is_empty())
    };
    if p.builtin_sandbox() {
        // Port 0 resolves below the ephemeral range, as the public listener's: a restart that
        // asks for the port again finds it free (an outgoing connection never holds it).
        let listener = crate::handover::bind_public(p.sandbox.listen)
            .with_context(|| format!("binding the sandbox provider on {}", p.sandbox.listen))?;
        let addr = listener.local_addr()?;
        if secrets.is_empty() {
            // Only this process signs and verifies: a random secret for its lifetime.
            secrets.push(hex_secret());
        }
        let base = format!("http://{addr}");
        let provider: Arc<dyn paygate_payouts::provider::PayoutProvider> = if p.provider == "cpn" {
            tracing::info!(sandbox = %addr, "payout provider: built-in sandbox speaking CPN");
            Arc::new(CpnProvider::new(&base, None, &p.cpn.blockchain, timeout))
        } else {
            tracing::info!(sandbox = %addr, "payout provider: built-in sandbox");
            Arc::new(HttpProvider::new(&base, None, timeout))
        };
        Ok((provider, secrets, Some(listener)))
    } else if p.provider == "cpn" {
        let provider = CpnProvider::new(&p.cpn.base_url, cpn_key(), &p.cpn.blockchain, timeout);
        Ok((Arc::new(provider), secrets, None))
    } else {
        let key = std::env::var(&p.provider_api_key_env)
            .ok()
            .filter(|k| !k.is_empty());
        if secrets.is_empty() {
            tracing::warn!(
                env = %p.webhook_secrets_env,
                "no webhook secret in the environment: every provider webhook will be refused"
            );
        }
        let provider = HttpProvider::new(&p.provider_url, key, timeout);
        Ok((Arc::new(provider), secrets, None))
    }
}

/// Where CPN's ECDSA-signed webhooks find their keys: `payout.cpn.base_url` (its API key from
/// `PAYGATE_CPN_API_KEY`), else the built-in sandbox when it signs that way, else nowhere.
pub(crate) fn notification_keys(
    cfg: &Config,
    sandbox: Option<std::net::SocketAddr>,
) -> Option<Arc<paygate_payouts::cpn::NotificationKeys>> {
    let p = &cfg.payout;
    let timeout = std::time::Duration::from_secs(p.request_timeout_seconds.max(1));
    let base = if !p.cpn.base_url.is_empty() {
        p.cpn.base_url.clone()
    } else if p.sandbox_settings().webhook_signing == "circle" {
        format!("http://{}", sandbox?)
    } else {
        return None;
    };
    let key = std::env::var("PAYGATE_CPN_API_KEY")
        .ok()
        .filter(|k| !k.is_empty());
    Some(Arc::new(paygate_payouts::cpn::NotificationKeys::new(
        &base, key, timeout,
    )))
}

fn hex_secret() -> Vec<u8> {
    hex::encode(rand::random::<[u8; 32]>()).into_bytes()
}
