//! How the payment service is put together at start: its constructor, what each deployment
//! adds to it (events, the relayer's calls, receipts) and the accessors of those parts.

use super::PaymentService;
use crate::settleable::Settleable;
use crate::usage::PlanUsage;
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
            events: None,
            chain: None,
            receipt_key: None,
            offers: None,
            eoas: Default::default(),
            recent_receipts: Default::default(),
        }
    }

    /// With the relayer's contract calls (smart wallets' checks, the ledger audit).
    pub fn with_chain(mut self, chain: Arc<dyn paygate_x402::facilitator::ChainCalls>) -> Self {
        self.chain = Some(chain);
        self
    }

    /// With seller webhook events emitted to `events`.
    pub fn with_events(mut self, events: Arc<crate::events::Events>) -> Self {
        self.events = Some(events);
        self
    }

    /// Where seller webhook events go, when this deployment emits them.
    pub fn events(&self) -> Option<&Arc<crate::events::Events>> {
        self.events.as_ref()
    }

    /// The relayer's contract calls, where this deployment has them.
    pub fn chain(&self) -> Option<&Arc<dyn paygate_x402::facilitator::ChainCalls>> {
        self.chain.as_ref()
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
}
