//! The control plane's state: everything a handler can reach, built once by `serve.rs`.

use crate::mcp::hub::McpHub;
use paygate_config::Config;
use paygate_gateway::payments::way::Payments;
use paygate_gateway::route_table::RouteTable;
use paygate_gateway::target_policy::TargetPolicy;
use paygate_gateway::usage::PlanUsage;
use paygate_payouts::engine::PayoutEngine;
use paygate_store::Store;
use paygate_x402::facilitator::Facilitator;
use paygate_x402::network::Networks;
use std::sync::Arc;

/// Everything a handler can reach. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub table: Arc<RouteTable>,
    pub config: Arc<Config>,
    /// The admin token, read once from the environment variable the config names.
    pub admin_token: Option<Arc<str>>,
    /// The paid step the gateway uses, shared with `/facilitator/*`; its facilitator (`None`:
    /// not configured, those endpoints answer `503`) is probed for health.
    pub payments: Arc<Payments>,
    /// Which upstream addresses routes may target.
    pub target_policy: Arc<TargetPolicy>,
    /// Request counters (written by the proxy) and facilitator health.
    pub metrics: Arc<paygate_gateway::metrics::Metrics>,
    /// MCP sessions and the client tool calls use.
    pub mcp: Arc<McpHub>,
    /// The payout provider corridors use (`None`: corridor quotes and payouts answer `503`).
    pub payouts: PayoutEngine,
    /// Payment channels (`batch-settlement`), where this deployment offers them: the
    /// channels API and the claims' background pass.
    pub channels: Option<Arc<paygate_gateway::channels::Channels>>,
    /// Secrets that verify provider webhooks (none: every webhook is refused).
    pub webhook_secrets: Arc<Vec<Vec<u8>>>,
    /// The provider's notification keys, for ECDSA-signed (CPN) webhooks (none: refused).
    pub notification_keys: Option<Arc<paygate_payouts::cpn::NotificationKeys>>,
}

impl AppState {
    /// The master key, for `what` needs it (`payer wallets`, `webhooks`): a `503 MISCONFIGURED`
    /// naming its variable when it is not set or not 64 hex characters.
    pub fn master_key(
        &self,
        what: &str,
    ) -> Result<paygate_domain::secrets::MasterKey, crate::error::ApiError> {
        let env = &self.config.orgs.master_key_env;
        match paygate_domain::secrets::MasterKey::from_env(env) {
            Some(Ok(m)) => Ok(m),
            Some(Err(_)) | None => Err(crate::error::ApiError::new(
                paygate_domain::ErrorCode::Misconfigured,
                format!("{what} need a master key: set {env} to 64 hex characters"),
            )),
        }
    }

    /// Stores a changed organisation and puts it in this node's route table at once (other
    /// nodes hear of it through the store).
    pub async fn save_org(
        &self,
        org: &paygate_domain::model::Org,
    ) -> paygate_domain::StoreResult<()> {
        self.store.update_org(org).await?;
        self.table.refresh_org(self.store.as_ref(), &org.id).await
    }

    pub fn new(
        store: Arc<dyn Store>,
        table: Arc<RouteTable>,
        config: Arc<Config>,
        target_policy: Arc<TargetPolicy>,
    ) -> Self {
        let admin_token = config.admin.token().map(Arc::from);
        let usage = Arc::new(PlanUsage::new(store.clone()));
        let networks = table.render_context().networks.clone();
        let service =
            paygate_gateway::payments::PaymentService::new(store.clone(), None, usage, networks);
        let payments = Arc::new(paygate_gateway::payments::registry::payments(
            service,
            &Default::default(),
        ));
        let payouts = PayoutEngine::new(store.clone(), None);
        Self {
            store,
            table,
            config,
            admin_token,
            payments,
            target_policy,
            metrics: paygate_gateway::metrics::Metrics::new(),
            mcp: Arc::new(McpHub::default()),
            payouts,
            channels: None,
            webhook_secrets: Arc::new(Vec::new()),
            notification_keys: None,
        }
    }

    pub fn with_metrics(mut self, metrics: Arc<paygate_gateway::metrics::Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The payout provider and the webhook secrets; the payout engine tells the seller's
    /// webhooks of its changes (so after [`Self::with_payments`]).
    pub fn with_payouts(
        mut self,
        provider: Arc<dyn paygate_payouts::provider::PayoutProvider>,
        webhook_secrets: Vec<Vec<u8>>,
    ) -> Self {
        let observer = self.payments.events().map(|e| {
            Arc::new(crate::payout_events::PayoutWebhooks(e.clone()))
                as Arc<dyn paygate_payouts::engine::PayoutObserver>
        });
        self.payouts =
            PayoutEngine::new(self.store.clone(), Some(provider)).with_observer(observer);
        self.webhook_secrets = Arc::new(webhook_secrets);
        self
    }

    /// Funds payouts on chain from each organisation's payout wallet.
    pub fn with_payout_funding(
        mut self,
        funding: Option<Arc<dyn paygate_payouts::funding::PayoutFunding>>,
    ) -> Self {
        self.payouts = self.payouts.clone().with_funding(funding);
        self
    }

    /// Where ECDSA-signed provider webhooks find their keys.
    pub fn with_notification_keys(
        mut self,
        keys: Option<Arc<paygate_payouts::cpn::NotificationKeys>>,
    ) -> Self {
        self.notification_keys = keys;
        self
    }

    /// The payment service the proxy uses (and with it the facilitator).
    pub fn with_payments(mut self, payments: Arc<Payments>) -> Self {
        self.payments = payments;
        self
    }

    /// With the payment channels the payment service was built with.
    pub fn with_channels(
        mut self,
        channels: Option<Arc<paygate_gateway::channels::Channels>>,
    ) -> Self {
        self.channels = channels;
        self
    }

    /// The configured networks (the route table's, built once).
    pub fn networks(&self) -> &Networks {
        &self.table.render_context().networks
    }

    pub fn facilitator(&self) -> Option<&Arc<dyn Facilitator>> {
        self.payments.facilitator()
    }
}
