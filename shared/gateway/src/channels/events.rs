//! The seller's webhook events about its channels (`channel.claimed`, `payment.refunded`): the
//! channel's state after the change, with what the change moved.

use super::Channels;
use paygate_domain::channel::ChannelRecord;

impl Channels {
    /// A channel event about `record` (its state after the change as the event's data).
    pub(super) fn channel_event(
        &self,
        event_type: &'static str,
        record: &ChannelRecord,
        extra: serde_json::Value,
    ) {
        self.channel_events(record, vec![(event_type, extra)]);
    }

    /// [`Self::channel_event`] for several events of one change, queued in this order.
    pub(super) fn channel_events(
        &self,
        record: &ChannelRecord,
        changes: Vec<(&'static str, serde_json::Value)>,
    ) {
        let Some(events) = &self.events else {
            return;
        };
        let state = serde_json::json!({
            "channelId": record.id,
            "routeId": record.route_id,
            "network": record.network,
            "payer": record.config.payer,
            "deposited": record.deposited.to_string(),
            "charged": record.charged.to_string(),
            "claimed": record.total_claimed.to_string(),
            "refunded": record.refunded.to_string(),
        });
        let queued = changes
            .into_iter()
            .map(|(event_type, extra)| {
                let mut data = state.clone();
                if let (Some(d), Some(e)) = (data.as_object_mut(), extra.as_object()) {
                    d.extend(e.clone());
                }
                (event_type, data)
            })
            .collect();
        events.emit_in_order_later(&record.org_id, &record.id, queued);
    }
}
