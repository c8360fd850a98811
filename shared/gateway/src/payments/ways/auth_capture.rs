//! `auth-capture` (x402's escrowed payment): the payer signs one ERC-3009 authorization for
//! the route's price into the commerce-payments escrow; paygate (the escrow's operator, its
//! relayer) checks it in the scheme's order, reserves its nonce, holds the funds in escrow
//! (`authorize`) and only then forwards. At the answer's head it sends the capture of what was
//! served (the price; for usage pricing the origin's stated charge, at most the price), writes
//! it on the record and answers with its transaction, without waiting for its block (as a card
//! payment is captured after the sale): the capture is confirmed, and the rest voided, once the
//! answer is over (`auth_capture/capture.rs`). An origin that answers 400 or more, times out or
//! cannot be reached costs the payer nothing:
//! the hold is voided. A streamed usage-priced answer whose charge comes in a trailer is
//! captured at its end. A captured payment may be refunded within the route's refund window
//! (`auth_capture/refunds.rs`, `POST /api/payments/{id}/refund`). A crash between the hold and its outcome leaves the
//! record open; reconciliation reads the escrow and voids what is still held (the payer's
//! protection wins when the answer's fate is unknown), captures what an answer's head committed
//! to (a capture sent and dropped), or records what was captured.

mod capture;
mod for_servers;
mod hold;
mod on_chain;
pub mod refunds;

use super::usage::{charge_of, stated_at_end};
use crate::payments::for_servers::ForServer;
use crate::payments::way::Payments;
use crate::payments::way::{
    Admission, Admitted, Difference, Ended, Gate, Held, OnChain, Parts, Paying, Receipt, Serving,
    Step, Terms, Unadmitted, Way,
};
use crate::payments::{Charge, Refusal, Reserve};
use crate::route_entry::RouteEntry;
use crate::usage::Slot;
use capture::Capturing;
use http::HeaderValue;
use paygate_domain::model::{GatewayPayment, PaymentStatus, PaymentTransfer, Route, Scheme};
use paygate_x402::auth_capture::{self, EscrowTerms, PaymentInfo};
use paygate_x402::facilitator::wire::{SettleResponse, SupportedKindWire as Kind, VerifyResponse};
use paygate_x402::facilitator::{CallError, ChainCalls};
use paygate_x402::money::UsdcAmount;
use paygate_x402::payment::{PaymentPayload, ProtocolVersion};
use paygate_x402::verify::Rejection;
use paygate_x402::{Offered, PaymentRequirements};
use std::sync::Arc;
use std::time::Instant;

/// How long after a `402` an `auth-capture` payment may be captured (its `captureDeadline`):
/// long enough for any request to be answered, short enough that a payer whose hold a failure
/// left behind can reclaim it soon (reconciliation voids it before then).
pub const CAPTURE_WINDOW_SECS: u64 = 900;

use hold::{hold, reserved, send_hold, Collect};
use on_chain::ESCROW_GAS;

/// `auth-capture`: held in escrow before forwarding, captured for what was served.
pub(crate) struct AuthCapture;

/// `auth-capture` as served: the relayer's calls as the escrow's operator, and the refund
/// terms.
pub(crate) struct Escrowing {
    chain: Arc<dyn ChainCalls>,
    /// The escrow's operator this deployment is (for the facilitator API; a route's
    /// requirement names it itself).
    operator: Option<alloy_primitives::Address>,
    /// Where refunds are counted against revenue.
    metrics: Option<Arc<crate::metrics::Metrics>>,
    /// How long a refund's request may still be sending it (its longest wait for a receipt):
    /// a pending refund younger than this, with no transaction known, is its request's own.
    refund_lease: std::time::Duration,
    /// The receiver refund collector sellers approve to fund their refunds.
    refund_collector: alloy_primitives::Address,
}

#[async_trait::async_trait]
impl Way for AuthCapture {
    fn build(&self, parts: &Parts) -> Option<Box<dyn Serving>> {
        Some(Box::new(Escrowing {
            chain: parts.chain.clone()?,
            operator: parts.terms.0.escrow().map(|t| t.operator),
            metrics: parts.metrics.clone(),
            refund_lease: parts.refund_lease,
            refund_collector: parts.refund_collector,
        }))
    }

    fn takes(&self, scheme: &str, version: ProtocolVersion) -> bool {
        scheme == auth_capture::SCHEME && version == ProtocolVersion::V2
    }

    /// The escrow's operator (its `captureAuthorizer`): the deployment's operator, where this
    /// deployment relays; the refund window is each route's.
    fn terms(&self, cfg: &paygate_config::Config) -> Option<Offered> {
        let operator = super::super::way::deployment_operator(cfg)?;
        Some(Offered::AuthCapture(EscrowTerms {
            operator,
            capture_window: CAPTURE_WINDOW_SECS,
            refund_window: 0,
        }))
    }

    fn offered(&self, route: &Route, scheme: Scheme, terms: &Terms) -> Option<Offered> {
        let deployment = terms.0.escrow().filter(|_| scheme == Scheme::AuthCapture)?;
        Some(Offered::AuthCapture(EscrowTerms {
            refund_window: route.refund_window_seconds.unwrap_or(0),
            ..*deployment
        }))
    }

    fn reconciles(&self, p: &GatewayPayment) -> bool {
        p.transfer == PaymentTransfer::AuthCapture
    }

    /// The escrow's state of the payment (`auth_capture/on_chain.rs`).
    async fn audit(
        &self,
        p: &GatewayPayment,
        at: &OnChain<'_>,
    ) -> Result<Option<Difference>, String> {
        on_chain::audit(p, at).await
    }

    /// A live request holds its payment while the origin answers.
    fn holds_while_answered(&self) -> bool {
        true
    }

    /// An open record (a crash, or an outcome not known) is decided by the escrow's state:
    /// still held, voided (the answer's fate is unknown, the payer is protected); captured,
    /// recorded so; released (voided, reclaimed), closed `FAILED`; never held, closed once the
    /// authorization expired, else left for the next pass.
    async fn reconcile(
        &self,
        p: &GatewayPayment,
        at: &OnChain<'_>,
    ) -> Result<Option<GatewayPayment>, String> {
        on_chain::reconcile(p, at).await
    }
}

#[async_trait::async_trait]
impl Serving for Escrowing {
    /// The deadlines count from each `402`: a route offering the scheme renders it afresh.
    fn declares_fresh(&self, entry: &RouteEntry) -> bool {
        entry
            .payment
            .as_ref()
            .is_some_and(|(_, c)| c.offer.escrow().is_some())
    }

    fn facilitator_kinds(&self, networks: &[&paygate_x402::network::Network]) -> Vec<Kind> {
        self.kinds(networks)
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

    async fn refund(
        &self,
        svc: &Payments,
        p: &GatewayPayment,
        amount: Option<UsdcAmount>,
        key: Option<&str>,
    ) -> Result<crate::payments::Refunded, crate::payments::RefundError> {
        self.refund_payment(svc, &p.org_id, &p.id, amount, key)
            .await
    }

    async fn admit(
        &self,
        svc: &Payments,
        p: &Paying<'_>,
        gate: &dyn Gate,
    ) -> Result<Admission, Unadmitted> {
        let refused = |r: Refusal| p.refused(svc, r);
        let requirements = p.requirements;
        let Some(terms) = p.challenge.offer.escrow() else {
            return Err(refused(Refusal::Rejected(Rejection::UnsupportedScheme)));
        };
        let chain = self.chain.clone();
        let payload =
            PaymentPayload::from_json(p.json, p.version).map_err(|e| refused(e.into()))?;
        let t0 = Instant::now();
        let escrowed =
            auth_capture::verify(&payload, requirements, terms, paygate_domain::unix_now())
                .map_err(|r| refused(Refusal::Rejected(r)))?;
        let chain_id = requirements.network.config.chain_id;
        if let Some(digest) = escrowed.wallet_check {
            // Not the payer's key: its smart wallet must accept it, before anything is reserved.
            svc.wallet_must_accept(
                chain_id,
                &escrowed.auth,
                digest,
                Rejection::InvalidSignature,
            )
            .await
            .map_err(refused)?;
        }
        let verify_us = t0.elapsed().as_micros() as u64;
        gate.payer(&escrowed.auth.from).map_err(refused)?;
        let upstream = gate.upstream(true).await.map_err(refused)?;
        let entry = p.req.entry;
        let mut record = reserved(
            p.req.org_id,
            &entry.route.id,
            requirements,
            &escrowed,
            verify_us,
        );
        let charge = Charge {
            org_id: p.req.org_id,
            route_id: &entry.route.id,
            requirements,
            plan_limit: Some(p.req.plan_limit),
            redeliver: false,
        };
        let slot = match svc.reserve(&mut record, &charge).await.map_err(refused)? {
            Reserve::Fresh(slot) => slot,
            // Still being held or captured: the client retries later. One whose capture was
            // sent was answered already (its capture is being confirmed): a replay.
            Reserve::Held(held, _)
                if held.status.is_open()
                    && held.escrow.as_ref().is_none_or(|e| e.capturing.is_none()) =>
            {
                return Err(refused(Refusal::StillSettling))
            }
            Reserve::Held(..) => return Err(refused(Refusal::Rejected(Rejection::NonceReplay))),
        };
        let held = hold(svc, chain.as_ref(), chain_id, &escrowed, &mut record, slot).await;
        let slot = held.map_err(refused)?;
        Ok(Admission {
            upstream,
            payment: Admitted(Box::new(EscrowHeld {
                stage: Stage::Held {
                    record: Box::new(record),
                    slot,
                },
                info: escrowed.info,
                chain,
                requirements: requirements.clone(),
                entry: entry.clone(),
                at_end: false,
                started: t0,
            })),
            receipt: None,
        })
    }
}

/// Where an admitted `auth-capture` payment stands.
enum Stage {
    /// Held in escrow, its outcome not recorded yet.
    Held {
        record: Box<GatewayPayment>,
        slot: Option<Slot>,
    },
    /// Its capture sent, until the answer is over (then confirmed off the answer's path).
    Capturing(Box<Capturing>),
    /// Voided (or its capture failed): nothing is left to do.
    Done,
}

struct EscrowHeld {
    stage: Stage,
    info: PaymentInfo,
    chain: Arc<dyn ChainCalls>,
    requirements: PaymentRequirements,
    entry: Arc<RouteEntry>,
    /// A streamed usage-priced answer whose head stated no charge: captured at its end.
    at_end: bool,
    started: Instant,
}

impl EscrowHeld {
    fn record(&self) -> Option<&GatewayPayment> {
        match &self.stage {
            Stage::Held { record, .. } => Some(record),
            Stage::Capturing(c) => Some(&c.paid.record),
            Stage::Done => None,
        }
    }

    /// What the origin's `stated` charge comes to, in USDC base units (at most the price).
    fn charge(&self, stated: Option<&HeaderValue>) -> u64 {
        let price = u128::from(self.requirements.amount.0);
        u64::try_from(charge_of(&self.entry, price, stated)).unwrap_or(self.requirements.amount.0)
    }

    /// Decides the hold: sends the capture of `charge` (USDC base units; zero captures nothing
    /// and voids the hold) and, once the node took it, writes it on the record and answers with
    /// its receipt; it is confirmed and the rest voided once the answer is over
    /// ([`Capturing::confirm`]). A capture refused by the escrow voids the hold and is answered
    /// with the refusal; one whose sending's outcome is unknown is left to reconciliation (which
    /// voids it if it is still held: nothing was answered).
    async fn decide(
        &mut self,
        svc: &Payments,
        charge: u64,
        why: &str,
    ) -> Result<Option<Receipt>, Refusal> {
        let (mut record, slot) = match std::mem::replace(&mut self.stage, Stage::Done) {
            Stage::Held { record, slot } => (*record, slot),
            other => {
                self.stage = other;
                return Ok(None);
            }
        };
        if charge == 0 {
            self.void(svc, &mut record, why).await;
            return Ok(None);
        }
        let units = self.requirements.token_units(UsdcAmount(charge));
        let (told, sent) = tokio::sync::oneshot::channel();
        let call = auth_capture::capture_call(&self.info, units);
        let (chain, chain_id, operator) = (
            self.chain.clone(),
            self.requirements.network.config.chain_id,
            self.info.operator,
        );
        // Mined (or not) off the answer's path: the head waits only until the node took it.
        let mined = tokio::spawn(async move {
            let chain = chain.as_ref();
            auth_capture::send_as_operator_told(
                chain,
                chain_id,
                operator,
                call,
                ESCROW_GAS,
                Some(told),
            )
            .await
        });
        let (tx, mined) = match sent.await {
            Ok(tx) => (tx, mined),
            // Not sent, or its outcome came first.
            Err(_) => match mined
                .await
                .unwrap_or_else(|e| Err(CallError::Ambiguous(e.to_string())))
            {
                Ok(tx) => (tx, tokio::spawn(async move { Ok(tx) })),
                Err(CallError::Ambiguous(m) | CallError::Pending(_, m)) => {
                    tracing::warn!(payment = %record.id, error = %m, "escrow capture sent, outcome unknown: left to reconciliation");
                    record.status = PaymentStatus::Unknown;
                    record.amount = UsdcAmount(charge);
                    self.store(svc, &record).await;
                    if let Some(s) = slot {
                        s.leave_to_reconciliation();
                    }
                    return Err(Refusal::Pending);
                }
                Err(e) => {
                    tracing::warn!(payment = %record.id, error = %e, "escrow capture refused; the hold is voided");
                    self.void(svc, &mut record, "the capture was refused").await;
                    return Err(Refusal::Rejected(Rejection::SettlementFailed));
                }
            },
        };
        // On the record before the answer goes out: a crash from here on is reconciled by
        // capturing what the answer served, not by voiding it.
        let stored = capture::capturing(record, UsdcAmount(charge), tx);
        self.store(svc, &stored).await;
        let settle_ms = self.started.elapsed().as_millis() as u64;
        let shown = capture::as_receipted(&stored, settle_ms);
        let paid = svc.paid(ProtocolVersion::V2, &self.requirements, shown, slot);
        let receipt = Receipt::of(&paid);
        let price = self.requirements.amount;
        let on_chain = (
            self.chain.clone(),
            self.requirements.network.config.chain_id,
        );
        let capturing = Capturing::new(stored, mined, paid, on_chain, self.info.clone(), price);
        self.stage = Stage::Capturing(Box::new(capturing));
        Ok(Some(receipt))
    }

    /// Voids the hold: the payer gets it all back; the record closes `FAILED` with `why` (or
    /// stays open for reconciliation when the void's outcome is unknown). The plan slot goes back.
    async fn void(&self, svc: &Payments, record: &mut GatewayPayment, why: &str) {
        let chain_id = self.requirements.network.config.chain_id;
        let sent = on_chain::void_hold(self.chain.as_ref(), chain_id, &self.info, record).await;
        record.updated_at = paygate_domain::now_rfc3339();
        match sent {
            Ok(_) => {
                record.status = PaymentStatus::Failed;
                record.failure = Some(format!("voided: {why}"));
                tracing::debug!(payment = %record.id, "auth-capture hold voided");
            }
            Err(e) => {
                // Still held (or unknown): reconciliation voids it.
                tracing::warn!(payment = %record.id, error = %e, "escrow void not done: left to reconciliation");
                record.status = PaymentStatus::Unknown;
                record.failure = Some(format!("to be voided: {why}"));
            }
        }
        self.store(svc, record).await;
    }

    async fn store(&self, svc: &Payments, record: &GatewayPayment) {
        capture::store(svc, record).await
    }
}

#[async_trait::async_trait]
impl Held for EscrowHeld {
    fn label(&self) -> &'static str {
        "ESCROW"
    }

    fn payment_id(&self) -> Option<&str> {
        self.record().map(|r| r.id.as_str())
    }

    fn settle_ms(&self) -> Option<u64> {
        self.record().and_then(|r| r.settle_ms)
    }

    async fn head(&mut self, svc: &Payments, status: u16, stated: Option<&HeaderValue>) -> Step {
        let route = &self.entry.route;
        if status < 400 && stated_at_end(route, stated) {
            self.at_end = true;
            return Step::Wait(None);
        }
        let (charge, why) = if status >= 400 {
            (0, format!("the origin answered {status}"))
        } else {
            (
                self.charge(stated),
                "the origin stated a charge of zero".to_string(),
            )
        };
        match self.decide(svc, charge, &why).await {
            Ok(receipt) => Step::Wait(receipt),
            Err(refusal) => Step::Refused(Box::new(svc.refused(
                &self.entry,
                refusal,
                ProtocolVersion::V2,
            ))),
        }
    }

    async fn end(mut self: Box<Self>, svc: &Arc<Payments>, end: Ended) -> Option<Receipt> {
        let mut receipt = None;
        if matches!(self.stage, Stage::Held { .. }) {
            // Waited for a trailer, or never answered: cut short, nothing is captured.
            let (charge, why) = if self.at_end && end.completed {
                (
                    self.charge(end.stated.as_ref()),
                    "the origin stated a charge of zero",
                )
            } else {
                (0, "the origin did not answer")
            };
            match self.decide(svc, charge, why).await {
                Ok(r) => receipt = r,
                Err(e) => {
                    tracing::warn!(error = %e, route = %self.entry.id, "an auth-capture charge stated at the end of a streamed answer was not captured")
                }
            }
        }
        if let Stage::Capturing(c) = std::mem::replace(&mut self.stage, Stage::Done) {
            // Confirmed off the answer's path: the connection is free for its next request.
            let (svc, status) = (svc.clone(), end.upstream_status);
            tokio::spawn(async move { c.confirm(&svc, status).await });
        }
        receipt
    }
}
