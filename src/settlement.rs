//! What settles payments, built from the configuration: the facilitator (embedded, with its
//! relayer, or remote) and, where the embedded one can send their transactions and a receiver
//! authorizer key is at hand, payment channels; and the lease that keeps a relayer account one
//! node's alone on a cluster.

use paygate_config::{Config, FacilitatorKind};
use paygate_store::Store;
use paygate_x402::facilitator::embedded::EmbeddedFacilitator;
use paygate_x402::facilitator::failover::{Failover, Routed};
use paygate_x402::facilitator::remote::RemoteFacilitator;
use paygate_x402::facilitator::Facilitator;
use paygate_x402::network::Networks;
use std::sync::Arc;
use std::time::Duration;

/// The facilitator (if any) and the embedded one's relayer address.
/// With the embedded one, its contract calls too (payment channels need them).
pub(crate) type Settling = (
    Option<Arc<dyn Facilitator>>,
    Option<String>,
    Option<Arc<dyn paygate_x402::facilitator::ChainCalls>>,
);

/// The configured facilitator, or `None` (paid requests then answer 503) when the embedded one
/// has no relayer key in the environment; with the embedded one, its relayer's address. A
/// network that lists facilitators (`[[networks.<name>.facilitators]]`) has its payments sent to
/// those, in order, failing over (`paygate_x402::facilitator::failover`); the others keep
/// `[facilitator]`.
pub(crate) fn build_facilitator(cfg: &Config, networks: &Networks) -> anyhow::Result<Settling> {
    let (base, relayer, chain) = deployment_facilitator(cfg, networks)?;
    let listed: Vec<_> = networks
        .all()
        .filter(|n| !n.config.facilitators.is_empty())
        .collect();
    if listed.is_empty() {
        return Ok((base, relayer, chain));
    }
    // "embedded" is this deployment's own, when it is the embedded one with its relayer.
    let embedded = chain.as_ref().and(base.clone());
    let timeout = Duration::from_secs(cfg.facilitator.request_timeout_seconds);
    let mut by_network = Vec::new();
    for n in listed {
        let mut members: Vec<(Arc<dyn Facilitator>, String)> = Vec::new();
        for e in &n.config.facilitators {
            let url = e.url.trim();
            let f: Arc<dyn Facilitator> = if url == "embedded" {
                embedded.clone().ok_or_else(|| {
                    anyhow::anyhow!(
                        "networks.{}.facilitators lists \"embedded\": it needs facilitator.kind = \"embedded\" and a relayer key in {}",
                        n.v1_name,
                        cfg.facilitator.relayer_key_env
                    )
                })?
            } else {
                let bearer = (!e.auth_header_env.is_empty())
                    .then(|| std::env::var(&e.auth_header_env).ok())
                    .flatten();
                Arc::new(
                    RemoteFacilitator::new(url, bearer, timeout)
                        .map_err(|e| anyhow::anyhow!("facilitator {url}: {e}"))?,
                )
            };
            members.push((f, e.fee.clone()));
        }
        tracing::info!(network = %n.v1_name, facilitators = members.len(), "facilitators tried in order, failing over");
        by_network.push((n.clone(), Arc::new(Failover::new(&n.v1_name, members))));
    }
    let routed: Arc<dyn Facilitator> = Arc::new(Routed::new(base, by_network));
    Ok((Some(routed), relayer, chain))
}

/// The deployment's `[facilitator]`.
fn deployment_facilitator(cfg: &Config, networks: &Networks) -> anyhow::Result<Settling> {
    let f = &cfg.facilitator;
    let timeout = Duration::from_secs(f.request_timeout_seconds);
    match f.kind {
        FacilitatorKind::Remote => {
            if f.url.trim().is_empty() {
                anyhow::bail!("facilitator.kind = \"remote\" needs facilitator.url");
            }
            let bearer = (!f.bearer_token_env.is_empty())
                .then(|| std::env::var(&f.bearer_token_env).ok())
                .flatten();
            let remote = RemoteFacilitator::new(&f.url, bearer, timeout)
                .map_err(|e| anyhow::anyhow!("facilitator: {e}"))?;
            tracing::info!(url = %f.url, "remote facilitator");
            Ok((Some(Arc::new(remote)), None, None))
        }
        FacilitatorKind::Embedded => {
            let Ok(key) = std::env::var(&f.relayer_key_env) else {
                tracing::warn!(
                    env = %f.relayer_key_env,
                    "no relayer key in the environment: paid requests will answer 503"
                );
                return Ok((None, None, None));
            };
            let embedded = EmbeddedFacilitator::new(
                networks,
                &key,
                Duration::from_secs(f.settle_timeout_seconds),
                timeout,
            )
            .map_err(|e| anyhow::anyhow!("facilitator: {e}"))?
            .with_operator(f.operator);
            let relayer = embedded.relayer().to_string();
            tracing::info!(relayer = %relayer, "embedded facilitator");
            let embedded = Arc::new(embedded);
            Ok((Some(embedded.clone()), Some(relayer), Some(embedded)))
        }
    }
}

/// Payment channels, where this deployment can serve them: the embedded facilitator's relayer
/// sends deposits and claims, and a receiver authorizer key signs claims.
pub(crate) fn build_channels(
    cfg: &Config,
    store: Arc<dyn Store>,
    chain: Option<Arc<dyn paygate_x402::facilitator::ChainCalls>>,
    metrics: Arc<paygate_gateway::metrics::Metrics>,
    events: Arc<paygate_gateway::events::Events>,
) -> Option<Arc<paygate_gateway::channels::Channels>> {
    let authorizer = paygate_domain::secrets::receiver_authorizer(
        &cfg.channels.receiver_authorizer_key_env,
        &cfg.orgs.master_key_env,
    );
    match (chain, authorizer) {
        (Some(chain), Some(authorizer)) => {
            tracing::info!(receiver_authorizer = %authorizer.address(), "payment channels offered");
            Some(Arc::new(
                paygate_gateway::channels::Channels::new(
                    store,
                    chain,
                    authorizer,
                    cfg.channels.clone(),
                )
                .with_metrics(metrics)
                .with_events(events),
            ))
        }
        (None, _) => None,
        (Some(_), None) => {
            tracing::warn!(
                "no master key and no receiver authorizer key: routes do not offer payment channels"
            );
            None
        }
    }
}

/// Payout funding on chain, when `payout.funding_network` names a network: each organisation's
/// payout wallet (derived from the master key) pays the provider through the facilitator; with
/// the chain the sandbox provider checks that funding on. `None` when not asked for; an error
/// when asked for but impossible (no master key, no embedded facilitator).
pub(crate) fn build_payout_funding(
    cfg: &Config,
    networks: &Networks,
    facilitator: Option<Arc<dyn Facilitator>>,
    chain: Option<Arc<dyn paygate_x402::facilitator::ChainCalls>>,
) -> anyhow::Result<
    Option<(
        Arc<dyn paygate_payouts::funding::PayoutFunding>,
        paygate_sandbox::FundingChain,
    )>,
> {
    let name = &cfg.payout.funding_network;
    if name.is_empty() {
        return Ok(None);
    }
    let network = networks
        .resolve(name)
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("payout.funding_network {name:?} is not configured"))?;
    let master = std::env::var(&cfg.orgs.master_key_env).unwrap_or_default();
    let (Some(facilitator), Some(chain)) = (facilitator, chain) else {
        anyhow::bail!(
            "payout.funding_network needs the embedded facilitator with its relayer key \
             (it sends the payout wallets' transfers and reads the chain)"
        );
    };
    let funding = paygate_payouts::funding::ChainFunding::new(
        &master,
        network.clone(),
        facilitator,
        chain.clone(),
    )
    .ok_or_else(|| {
        anyhow::anyhow!(
            "payout.funding_network needs a master key in {} (payout wallets derive from it)",
            cfg.orgs.master_key_env
        )
    })?;
    tracing::info!(network = %network.caip2, "payouts funded on chain from payout wallets");
    // The sandbox gives a failed payout's USDC back when it holds its funding address's key.
    let returner = std::env::var("PAYGATE_SANDBOX_FUNDING_KEY")
        .ok()
        .and_then(|k| {
            k.trim()
                .parse::<alloy_signer_local::PrivateKeySigner>()
                .ok()
        })
        .filter(|k| {
            let ours = k
                .address()
                .to_checksum(None)
                .eq_ignore_ascii_case(&cfg.payout.sandbox.funding_address);
            if !ours {
                tracing::warn!(
                    "PAYGATE_SANDBOX_FUNDING_KEY is not the key of payout.sandbox.funding_address: \
                     the sandbox will not give failed payouts' USDC back"
                );
            }
            ours
        });
    Ok(Some((
        Arc::new(funding),
        paygate_sandbox::FundingChain {
            calls: chain,
            network,
            returner,
        },
    )))
}

/// The lease that makes a relayer account this node's alone among the nodes (two nodes sending
/// from one account would race for its chain nonces).
fn relayer_lease(relayer: &str) -> String {
    format!("relayer:{}", relayer.to_ascii_lowercase())
}

/// Takes the relayer's lease at start, waiting a little for a previous run of this node whose
/// connection the database has not dropped yet; another live node holding it is a mistake.
pub(crate) async fn claim_relayer(store: &dyn Store, relayer: &str) -> anyhow::Result<()> {
    let lease = relayer_lease(relayer);
    for _ in 0..20 {
        if store.hold_lease(&lease).await? {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    anyhow::bail!(
        "relayer {relayer} is in use by another node of this database: give every node its own \
         relayer key"
    )
}

/// Re-checks the relayer's lease every `every`; losing it to another node is an operator's
/// mistake worth an ERROR line (the database connection merely dropping is retaken quietly).
pub(crate) async fn keep_relayer_lease(
    store: Arc<dyn Store>,
    relayer: Option<String>,
    every: Duration,
) {
    let Some(relayer) = relayer else {
        return std::future::pending().await;
    };
    let lease = relayer_lease(&relayer);
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        match store.hold_lease(&lease).await {
            Ok(true) | Err(_) => {}
            Ok(false) => tracing::error!(
                relayer = %relayer,
                "another node uses this node's relayer key: settlements may collide on chain \
                 nonces; give every node its own relayer key"
            ),
        }
    }
}

/// The secret MPP challenges are bound with: the deployment's (`PAYGATE_MPP_SECRET`, else
/// derived from the master key), or one drawn for this process alone (a challenge is then paid
/// at the node that issued it).
pub(crate) fn mpp_secret(cfg: &Config) -> Arc<[u8]> {
    match paygate_domain::secrets::mpp_challenge_secret(&cfg.orgs.master_key_env) {
        Some(s) => Arc::from(s),
        None => {
            tracing::info!("MPP challenges are bound with this process's own secret: set the master key for a cluster");
            Arc::from(rand::random::<[u8; 32]>().to_vec())
        }
    }
}

/// The host (and port) of the public base URL: the realm MPP challenges name.
pub(crate) fn origin_host(public_base_url: &str) -> String {
    let rest = public_base_url
        .split_once("://")
        .map_or(public_base_url, |(_, r)| r);
    rest.split('/').next().unwrap_or_default().to_string()
}
