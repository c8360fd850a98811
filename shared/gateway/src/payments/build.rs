//! How the payment service is put together at start: its constructor, what each deployment
//! adds to it (events, metrics, the relayer's calls, channels, windows, refund terms) and the
//! accessors of those parts.

use super::PaymentService;
use crate::settleable::Settleable;
use crate::usage::PlanUsage;
use alloy_primitives::Address;
use paygate_store::Store;
use paygate_x402::facilitator::Facilitator;
use paygate_x402::network::Networks;
use std::sync::Arc;

impl PaymentService {
    /// `networks`: the configured ones, of which the facilitator settles some.
    pub fn new(
        store: Arc<dyn Store>,
        facilitator: Option<Arc<dyn Facilitator>>,
        usage: Arc<PlanUsage>,
        networks: Networks,
    ) -> Self {
        let settleable = match facilitator {
            Some(_) => Settleable::new(networks),
            None => Settleable::none(networks),
        };
        Self {
            store,
            facilitator,
            usage,
            settleable,
            channels: None,
            windows: None,
            events: None,
            metrics: None,
            chain: None,
            receipt_key: None,
            offers: None,
            eoas: Default::default(),
            refund_lease: std::time::Duration::from_secs(60),
            refund_collector: paygate_x402::auth_capture::RECEIVER_REFUND_COLLECTOR_ADDRESS,
        }
    }

    /// With seller webhook events emitted to `events`.
    pub fn with_events(mut self, events: Arc<crate::events::Events>) -> Self {
        self.events = Some(events);
        self
    }

    /// With refunds counted against revenue in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Where seller webhook events go, when this deployment emits them.
    pub fn events(&self) -> Option<&Arc<crate::events::Events>> {
        self.events.as_ref()
    }

    /// With access windows served by `windows`.
    pub fn with_windows(mut self, windows: Arc<crate::windows::Windows>) -> Self {
        self.windows = Some(windows);
        self
    }

    /// With the relayer's contract calls (the `auth-capture` escrow is called through them).
    pub fn with_chain(mut self, chain: Arc<dyn paygate_x402::facilitator::ChainCalls>) -> Self {
        self.chain = Some(chain);
        self
    }

    /// The relayer's contract calls, where this deployment has them.
    pub fn chain(&self) -> Option<&Arc<dyn paygate_x402::facilitator::ChainCalls>> {
        self.chain.as_ref()
    }

    /// With payment channels served by `channels`.
    pub fn with_channels(mut self, channels: Arc<crate::channels::Channels>) -> Self {
        self.channels = Some(channels);
        self
    }

    /// The payment channels service, where this deployment offers channels.
    pub fn channels(&self) -> Option<&Arc<crate::channels::Channels>> {
        self.channels.as_ref()
    }

    /// Which networks settle now, as the facilitator last said.
    pub fn settleable(&self) -> &Settleable {
        &self.settleable
    }

    /// The plan counters this service takes slots from.
    pub fn usage(&self) -> &Arc<PlanUsage> {
        &self.usage
    }

    pub fn facilitator(&self) -> Option<&Arc<dyn Facilitator>> {
        self.facilitator.as_ref()
    }

    /// With a refund's request taking at most `lease` to send it and learn its outcome (the
    /// time a payment is in flight: [`paygate_config::FacilitatorConfig::in_flight`]).
    pub fn with_refund_lease(mut self, lease: std::time::Duration) -> Self {
        self.refund_lease = lease;
        self
    }

    /// With refunds funded through the receiver refund collector at `collector` (sellers
    /// approve it; [`paygate_x402::auth_capture::RECEIVER_REFUND_COLLECTOR_ADDRESS`] unless configured).
    pub fn with_refund_collector(mut self, collector: Address) -> Self {
        self.refund_collector = collector;
        self
    }
}
