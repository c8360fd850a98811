//! `batch-settlement` (payment channels, `crate::channels`): a voucher is admitted before the
//! request is forwarded (the channel locked) and charged once the origin answered (its price, or
//! for a usage-priced route what the origin stated); a failed or cut-short answer charges
//! nothing and the same voucher can be sent again. A payer's refund is answered here.

mod for_servers;

use super::usage::{charge_of, stated_at_end};
use crate::channels::{self, ChannelCharge, ChannelRefusal};
use crate::payments::for_servers::ForServer;
use crate::payments::way::Payments;
use crate::payments::way::{
    Admission, Admitted, Ended, Gate, Held, Parts, Paying, Receipt, Served, Serving, Step, Terms,
    Unadmitted, Way,
};
use crate::payments::Refusal;
use crate::route_entry::RouteEntry;
use http::HeaderValue;
use paygate_domain::model::{Route, Scheme};
use paygate_x402::batch::ChannelPayloadWire;
use paygate_x402::facilitator::wire::{SettleResponse, SupportedKindWire as Kind, VerifyResponse};
use paygate_x402::network::Network;
use paygate_x402::payment::ProtocolVersion;
use paygate_x402::verify::Rejection;
use paygate_x402::Offered;
use std::sync::Arc;

pub(crate) struct Batch;

/// Payment channels as served: the channels' store, chain and claims.
struct Channeled {
    channels: Arc<channels::Channels>,
}

#[async_trait::async_trait]
impl Way for Batch {
    fn build(&self, parts: &Parts) -> Option<Box<dyn Serving>> {
        Some(Box::new(Channeled {
            channels: parts.channels.clone()?,
        }))
    }

    fn takes(&self, scheme: &str, version: ProtocolVersion) -> bool {
        // A v2 scheme: the v1 forms only ever carry `exact` (whose decoder says what is wrong).
        scheme == paygate_x402::batch::SCHEME && version == ProtocolVersion::V2
    }

    /// Channel terms where this deployment has a receiver authorizer.
    fn terms(&self, cfg: &paygate_config::Config) -> Option<Offered> {
        let authorizer = paygate_domain::secrets::receiver_authorizer(
            &cfg.channels.receiver_authorizer_key_env,
            &cfg.orgs.master_key_env,
        )?;
        Some(Offered::Batch(paygate_x402::BatchTerms {
            receiver_authorizer: authorizer.address(),
            withdraw_delay: cfg.channels.withdraw_delay_seconds,
        }))
    }

    fn offered(&self, _route: &Route, scheme: Scheme, terms: &Terms) -> Option<Offered> {
        (scheme == Scheme::BatchSettlement)
            .then(|| terms.0.batch().cloned().map(Offered::Batch))
            .flatten()
    }
}

#[async_trait::async_trait]
impl Serving for Channeled {
    /// `batch-settlement` (v2) on every network that settles now.
    fn facilitator_kinds(&self, networks: &[&Network]) -> Vec<Kind> {
        let kinds = paygate_x402::facilitator::SupportedKind::batch(networks.iter().copied());
        kinds.into_iter().map(Kind::from).collect()
    }

    async fn verify_for(
        &self,
        svc: &Payments,
        call: &ForServer<'_>,
    ) -> Result<VerifyResponse, Refusal> {
        self.verify_call(svc, call).await
    }

    async fn settle_for(
        &self,
        svc: &Payments,
        call: &ForServer<'_>,
    ) -> Result<SettleResponse, Refusal> {
        self.settle_call(svc, call).await
    }

    async fn admit(
        &self,
        svc: &Payments,
        p: &Paying<'_>,
        gate: &dyn Gate,
    ) -> Result<Admission, Unadmitted> {
        let refused = |r: Refusal| p.refused(svc, r);
        let wire = paygate_x402::batch::channel_message(p.json)
            .map_err(|e| refused(ChannelRefusal::Malformed(e.to_string()).into()))?;
        let channels = &self.channels;
        let Some(terms) = p.challenge.offer.batch() else {
            return Err(refused(Refusal::Rejected(Rejection::UnsupportedScheme)));
        };
        let entry = p.req.entry;
        let charge = ChannelCharge {
            org_id: p.req.org_id,
            route_id: &entry.route.id,
            requirements: p.requirements,
            terms,
        };
        if matches!(wire, ChannelPayloadWire::Refund { .. }) {
            // The payer takes back what is left: answered, nothing forwarded.
            let refunded = channels
                .refund(&wire, &charge)
                .await
                .map_err(|r| refused(r.into()))?;
            return Err(Unadmitted::Served(Box::new(refund_answer(&refunded))));
        }
        // No connection is opened first (as `exact` does): a voucher is charged only after the
        // origin answered, so an origin that cannot be reached charges nothing anyway.
        let upstream = gate.upstream(false).await.map_err(refused)?;
        let voucher = channels
            .admit(&wire, &charge)
            .await
            .map_err(|r| refused(r.into()))?;
        gate.payer(&voucher.payer()).map_err(refused)?;
        Ok(Admission {
            upstream,
            payment: Admitted(Box::new(ChannelHeld {
                channels: self.channels.clone(),
                voucher: Some(voucher),
                entry: entry.clone(),
                at_end: false,
            })),
            receipt: None,
        })
    }
}

/// The answer to a payer's channel refund: the refund went on chain; its receipt says the same.
fn refund_answer(refunded: &channels::refunds::Refunded) -> Served {
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct RefundAnswer<'a> {
        message: &'static str,
        channel_id: &'a str,
        refunded_amount: String,
    }
    let body = RefundAnswer {
        message: "Refund acknowledged",
        channel_id: &refunded.record.id,
        refunded_amount: refunded.amount.to_string(),
    };
    Served {
        outcome: "CHANNEL_REFUND",
        status: 200,
        content_type: Some("application/json".into()),
        body: serde_json::to_vec(&body).unwrap_or_default(),
        receipt: ("PAYMENT-RESPONSE".into(), refunded.header()),
        mark: None,
    }
}

/// A channel voucher admitted for a route's request (until charged or dropped: dropped, the
/// channel's lock is released and the same voucher can be sent again).
struct ChannelHeld {
    channels: Arc<channels::Channels>,
    voucher: Option<channels::Admitted>,
    entry: Arc<RouteEntry>,
    /// A usage-priced streamed answer whose head stated no charge: charged at its end.
    at_end: bool,
}

impl ChannelHeld {
    /// Commits the voucher's charge: the price, or for a usage-priced route what the origin
    /// `stated`, at most the price.
    async fn charge(&mut self, svc: &Payments, stated: Option<&HeaderValue>) -> Option<Receipt> {
        let (channels, voucher) = (&self.channels, self.voucher.take()?);
        let price = voucher.price();
        let charge = charge_of(&self.entry, price, stated);
        match channels.finish(voucher, charge).await {
            Ok(mut receipt) => {
                // Signed as served (x402 `offer-and-receipt`), where the deployment signs.
                let r = &receipt.response;
                let resource = self.entry.payment.as_ref().map(|(req, _)| &req.resource);
                receipt.response.extensions = resource.and_then(|resource| {
                    svc.receipt_extension(
                        &r.network,
                        resource,
                        r.payer.as_deref().unwrap_or_default(),
                        &r.transaction,
                    )
                });
                Some(Receipt {
                    header: "payment-response",
                    value: receipt.header(),
                    charged: u64::try_from(receipt.charged).unwrap_or(u64::MAX),
                })
            }
            Err(e) => {
                tracing::warn!(error = %e, "channel charge not committed");
                None
            }
        }
    }
}

#[async_trait::async_trait]
impl Held for ChannelHeld {
    fn label(&self) -> &'static str {
        "CHANNEL_VOUCHER"
    }

    async fn head(&mut self, svc: &Payments, status: u16, stated: Option<&HeaderValue>) -> Step {
        if status >= 400 {
            // A failed answer leaves the channel as it was.
            return Step::Done(None);
        }
        let route = &self.entry.route;
        if stated_at_end(route, stated) {
            // Its trailer may state the charge: charged when the answer has passed.
            self.at_end = true;
            return Step::Wait(None);
        }
        Step::Done(self.charge(svc, stated).await)
    }

    async fn end(
        mut self: Box<Self>,
        svc: &std::sync::Arc<Payments>,
        end: Ended,
    ) -> Option<Receipt> {
        if !(self.at_end && end.completed) {
            // Cut short (or never answered): nothing is charged.
            return None;
        }
        self.charge(svc, end.stated.as_ref()).await
    }
}
