//! `payout.updated` for the seller's webhooks: the payout engine tells its observer of every
//! status change it records, whatever made it, and this turns each into the event, the payout
//! as its status endpoint shows it.

use paygate_gateway::events::Events;
use paygate_payouts::engine::PayoutObserver;
use paygate_payouts::views::PayoutView;
use paygate_payouts::Payout;
use std::sync::Arc;

pub(crate) struct PayoutWebhooks(pub Arc<Events>);

#[async_trait::async_trait]
impl PayoutObserver for PayoutWebhooks {
    async fn changed(&self, p: &Payout) {
        let data = serde_json::to_value(PayoutView::from(p)).unwrap_or_default();
        self.0.emit(&p.org_id, "payout.updated", &p.id, data).await;
    }
}
