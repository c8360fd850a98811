//! Refunds of captured `auth-capture` payments (`POST /api/payments/{id}/refund`): the escrow's
//! `refund`, funded by the seller that was paid (the payment's receiver, through paygate's
//! receiver refund collector, which the seller's wallet approves once; never the deployment's
//! money), within the payment's refund deadline, up to what was captured and not refunded.
//! A seller's wallet that cannot cover the refund (no approval, or too little USDC) is told so
//! before anything is written or sent.
//!
//! Exactly once, across retries, concurrent requests, nodes and crashes: a refund is first
//! written on the payment as pending (a compare-and-set on the record as read: of two concurrent
//! refunds one is pending, the other sees it), then sent, then recorded done. A pending refund
//! whose outcome was never recorded (a crash, an unknown outcome) is decided by the next refund
//! request of the payment from the escrow's `refundableAmount`: lower by its amount, it landed;
//! unchanged while its transaction (kept on the pending refund once sent) is not mined, it is
//! still pending and nothing is sent again; unchanged once that transaction reverted (or when
//! none was sent), it did not land (and may be asked again). A retry under the same
//! `Idempotency-Key` answers the refund it made.

use crate::payments::way::Payments;
use alloy_primitives::{Address, U256};
use paygate_domain::model::{EscrowRefund, GatewayPayment, PaymentStatus, PaymentTransfer};
use paygate_store::PaymentGuard;
use paygate_x402::auth_capture::{self, PaymentInfo};
use paygate_x402::facilitator::{CallError, ChainCalls, TxOutcome};
use paygate_x402::money::UsdcAmount;
use paygate_x402::permit2::IErc20Permit2;

/// Gas for the escrow's `refund` (and the operator's one approval of the refund collector).
const REFUND_GAS: u64 = 300_000;

pub use crate::payments::refund::{RefundError, Refunded};

/// How many times a refund re-reads the payment when another writer changed it meanwhile.
const ATTEMPTS: usize = 5;

/// How long a refund asked while the payment's capture (sent after its answer) is unconfirmed
/// waits for it, re-reading the record: about a block on a live chain, so a seller refunding
/// a payment just served is not told to come back; longer, `504 SETTLEMENT_PENDING`.
const CAPTURE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
/// How often the record is read again meanwhile.
const CAPTURE_POLL: std::time::Duration = std::time::Duration::from_millis(50);

impl super::Escrowing {
    /// Refunds `amount` (all that is refundable when `None`) of `org_id`'s payment `id`, once per
    /// `key`.
    pub(super) async fn refund_payment(
        &self,
        svc: &Payments,
        org_id: &str,
        id: &str,
        amount: Option<UsdcAmount>,
        key: Option<&str>,
    ) -> Result<Refunded, RefundError> {
        let chain = self.chain.clone();
        let capture_deadline = tokio::time::Instant::now() + CAPTURE_WAIT;
        let mut attempts = 0;
        while attempts < ATTEMPTS {
            let p = match svc.store.get_payment(id).await? {
                Some(p) if p.org_id == org_id => p,
                _ => return Err(RefundError::NotFound),
            };
            let esc = match Escrow::of(svc, self.refund_collector, &p) {
                Err(RefundError::Capturing) if tokio::time::Instant::now() < capture_deadline => {
                    tokio::time::sleep(CAPTURE_POLL).await;
                    continue;
                }
                other => other?,
            };
            attempts += 1;
            if let Some(pending) = p.escrow.as_ref().and_then(|e| e.pending_refund.clone()) {
                if pending.transaction.is_none() && self.refund_in_flight(&pending) {
                    // Its own request may be sending it right now: only that request (or,
                    // after the lease, the chain) decides it.
                    return Err(RefundError::Pending);
                }
                let decided = esc.decide_pending(chain.as_ref(), &p, &pending).await?;
                let landed = decided
                    .escrow
                    .as_ref()
                    .is_some_and(|e| e.refunds.iter().any(|r| r.id == pending.id));
                let written = svc
                    .store
                    .write_payment_if(&decided, PaymentGuard::Unchanged(&p.updated_at))
                    .await?;
                if written && landed {
                    self.refunded_event(svc, &decided, &pending).await;
                }
                continue;
            }
            let escrow = p
                .escrow
                .as_ref()
                .ok_or(RefundError::NotRefundable("not an escrowed payment"))?;
            if let Some(done) = escrow
                .refunds
                .iter()
                .find(|r| key.is_some() && r.idempotency_key.as_deref() == key)
            {
                if amount.is_some_and(|a| a != done.amount) {
                    return Err(RefundError::KeyReused);
                }
                return Ok(Refunded {
                    refund: done.clone(),
                    payment: p.clone(),
                });
            }
            let refundable = escrow.refundable();
            let amount = amount.unwrap_or(refundable);
            if refundable.0 == 0 {
                return Err(RefundError::NotRefundable(
                    "the payment is refunded in full",
                ));
            }
            if amount.0 == 0 || amount > refundable {
                return Err(RefundError::ExceedsCapture(refundable));
            }
            let terms = &escrow.terms;
            let refunds_on = terms.refund_expiry > terms.authorization_expiry;
            if !refunds_on || paygate_domain::unix_now() >= terms.refund_expiry {
                return Err(RefundError::WindowClosed);
            }
            esc.covered(chain.as_ref(), amount).await?;
            let pending = EscrowRefund {
                id: paygate_domain::ids::new_id("rfd"),
                amount,
                idempotency_key: key.map(str::to_string),
                transaction: None,
                sender: chain.relayer().map(|a| a.to_checksum(None)),
                created_at: paygate_domain::now_rfc3339(),
            };
            let mut asked = p.clone();
            asked.updated_at = paygate_domain::now_rfc3339();
            if let Some(e) = asked.escrow.as_mut() {
                e.pending_refund = Some(pending.clone());
            }
            if !svc
                .store
                .write_payment_if(&asked, PaymentGuard::Unchanged(&p.updated_at))
                .await?
            {
                continue;
            }
            return self.send(svc, chain.as_ref(), &esc, asked, pending).await;
        }
        Err(RefundError::Busy)
    }

    /// Sends the refund written pending on `asked`, then records its outcome.
    async fn send(
        &self,
        svc: &Payments,
        chain: &dyn ChainCalls,
        esc: &Escrow,
        asked: GatewayPayment,
        mut pending: EscrowRefund,
    ) -> Result<Refunded, RefundError> {
        let sent = esc
            .call(
                chain,
                auth_capture::refund_call(&esc.info, esc.units(pending.amount), esc.collector),
            )
            .await;
        let mut after = asked.clone();
        after.updated_at = paygate_domain::now_rfc3339();
        let outcome = match sent {
            Ok(tx) => {
                pending.transaction = Some(tx.to_string());
                if let Some(e) = after.escrow.as_mut() {
                    e.refunds.push(pending.clone());
                    e.pending_refund = None;
                }
                Ok(())
            }
            // Sent, outcome unknown: left pending, decided by the next request from the escrow.
            Err(CallError::Ambiguous(m)) => {
                tracing::warn!(payment = %asked.id, error = %m, "escrow refund sent, outcome unknown");
                return Err(RefundError::Pending);
            }
            // Sent as `tx`, not mined in time: kept pending with its transaction, so the next
            // request waits for that transaction's outcome instead of sending another.
            Err(CallError::Pending(tx, m)) => {
                tracing::warn!(payment = %asked.id, transaction = %tx, error = %m, "escrow refund sent, not mined yet");
                pending.transaction = Some(tx.to_string());
                if let Some(e) = after.escrow.as_mut() {
                    e.pending_refund = Some(pending);
                }
                svc.store
                    .write_payment_if(&after, PaymentGuard::Unchanged(&asked.updated_at))
                    .await?;
                return Err(RefundError::Pending);
            }
            Err(e) => {
                if let Some(x) = after.escrow.as_mut() {
                    x.pending_refund = None;
                }
                Err(match e {
                    CallError::Reverted(m) => {
                        tracing::warn!(payment = %asked.id, receiver = %esc.info.receiver, error = %m, "the escrow refused a refund");
                        RefundError::Refused(m)
                    }
                    other => RefundError::ChainDown(other.to_string()),
                })
            }
        };
        let written = svc
            .store
            .write_payment_if(&after, PaymentGuard::Unchanged(&asked.updated_at))
            .await?;
        outcome?;
        if written {
            self.refunded_event(svc, &after, &pending).await;
        } else {
            // Another request decided the pending refund meanwhile (from the escrow): its record
            // stands, and it queued the refund's event (each refund's event once).
            tracing::debug!(payment = %asked.id, "a refund's outcome was recorded by another request");
        }
        tracing::info!(payment = %after.id, refund = %pending.id, amount = pending.amount.0, "auth-capture payment refunded");
        Ok(Refunded {
            refund: pending,
            payment: after,
        })
    }

    /// Whether the request that wrote `pending` may still be sending it (written less than the
    /// refund lease ago).
    fn refund_in_flight(&self, pending: &EscrowRefund) -> bool {
        let written = time::OffsetDateTime::parse(
            &pending.created_at,
            &time::format_description::well_known::Rfc3339,
        );
        written.is_ok_and(|t| time::OffsetDateTime::now_utc() - t < self.refund_lease)
    }

    /// A refund recorded (once per refund: by the request whose write decided it): counted
    /// against its route's revenue, and `payment.refunded` about the payment (so it reaches an
    /// endpoint after the payment's `payment.settled` and its earlier refunds'), queued before
    /// the refund is answered. The event says what the payment nets the seller now.
    async fn refunded_event(&self, svc: &Payments, p: &GatewayPayment, refund: &EscrowRefund) {
        if let Some(metrics) = &self.metrics {
            metrics.record_refund(crate::metrics::RefundEvent {
                org_id: std::sync::Arc::from(p.org_id.as_str()),
                route_id: std::sync::Arc::from(p.route_id.as_str()),
                amount: refund.amount.0,
                at: paygate_domain::unix_now(),
            });
        }
        let Some(events) = &svc.events else { return };
        let mut data = crate::events::payment_data(p);
        let (refunded, net) = p
            .escrow
            .as_ref()
            .map_or((UsdcAmount(0), UsdcAmount(0)), |e| {
                (e.refunded(), e.refundable())
            });
        data["refund"] = serde_json::json!({
            "id": refund.id,
            "amountUSD": refund.amount.to_decimal().to_string(),
            "transaction": refund.transaction,
        });
        data["refundedUSD"] = refunded.to_decimal().to_string().into();
        data["netUSD"] = net.to_decimal().to_string().into();
        events
            .emit(&p.org_id, "payment.refunded", &p.id, data)
            .await;
    }
}

/// A captured escrowed payment, as the chain knows it. Its token is USDC (the scheme is
/// offered for USDC only): one token unit a USDC base unit.
struct Escrow {
    info: PaymentInfo,
    chain_id: u64,
    /// The receiver refund collector the seller approved.
    collector: Address,
}

impl Escrow {
    fn of(svc: &Payments, collector: Address, p: &GatewayPayment) -> Result<Self, RefundError> {
        let escrow = match (&p.escrow, p.transfer, p.status) {
            (Some(e), PaymentTransfer::AuthCapture, PaymentStatus::Settled) => e,
            (Some(e), PaymentTransfer::AuthCapture, s) if s.is_open() && e.capturing.is_some() => {
                return Err(RefundError::Capturing)
            }
            _ => {
                return Err(RefundError::NotRefundable(
                    "only a captured auth-capture payment can be refunded",
                ))
            }
        };
        let network =
            svc.settleable
                .networks()
                .resolve(&p.network)
                .ok_or(RefundError::NotRefundable(
                    "the payment's network is not configured here",
                ))?;
        let payer: Address = paygate_x402::address::parse_address(&p.payer)
            .ok_or(RefundError::NotRefundable("malformed payment record"))?;
        let info = escrow
            .terms
            .info(payer)
            .ok_or(RefundError::NotRefundable("malformed payment record"))?;
        Ok(Self {
            info,
            chain_id: network.config.chain_id,
            collector,
        })
    }

    fn units(&self, usd: UsdcAmount) -> U256 {
        U256::from(usd.0)
    }

    async fn call(
        &self,
        chain: &dyn ChainCalls,
        data: Vec<u8>,
    ) -> Result<alloy_primitives::B256, CallError> {
        auth_capture::send_as_operator(chain, self.chain_id, self.info.operator, data, REFUND_GAS)
            .await
    }

    /// Whether the seller's wallet (the payment's receiver) can fund `amount`: it approved the
    /// receiver refund collector for at least that much and holds it. Read before anything is
    /// written or sent, so a refund it cannot cover moves nothing.
    async fn covered(&self, chain: &dyn ChainCalls, amount: UsdcAmount) -> Result<(), RefundError> {
        use alloy_sol_types::SolCall;
        let receiver = self.info.receiver;
        let read = |data: Vec<u8>| chain.view_call(self.chain_id, self.info.token, data);
        let down = |e: CallError| RefundError::ChainDown(e.to_string());
        let allowance = IErc20Permit2::allowanceCall {
            owner: receiver,
            spender: self.collector,
        }
        .abi_encode();
        let allowance =
            IErc20Permit2::allowanceCall::abi_decode_returns(&read(allowance).await.map_err(down)?)
                .unwrap_or_default();
        let want = self.units(amount);
        if allowance < want {
            return Err(RefundError::SellerCannotCover(format!(
                "the receiver wallet {receiver} has approved the refund collector {} for {} USDC, \
                 below the refund of {} USDC (approve it once from that wallet)",
                self.collector,
                UsdcAmount::of_units(allowance).to_decimal(),
                amount.to_decimal()
            )));
        }
        let balance = IErc20Permit2::balanceOfCall { owner: receiver }.abi_encode();
        let balance =
            IErc20Permit2::balanceOfCall::abi_decode_returns(&read(balance).await.map_err(down)?)
                .unwrap_or_default();
        if balance < want {
            return Err(RefundError::SellerCannotCover(format!(
                "the receiver wallet {receiver} holds {} USDC, below the refund of {} USDC",
                UsdcAmount::of_units(balance).to_decimal(),
                amount.to_decimal()
            )));
        }
        Ok(())
    }

    /// `p` with its pending refund decided from the escrow: landed (the escrow's refundable
    /// amount is lower by it) or not (unchanged).
    async fn decide_pending(
        &self,
        chain: &dyn ChainCalls,
        p: &GatewayPayment,
        pending: &EscrowRefund,
    ) -> Result<GatewayPayment, RefundError> {
        let mut decided = p.clone();
        decided.updated_at = paygate_domain::now_rfc3339();
        let before = {
            let escrow = p
                .escrow
                .as_ref()
                .ok_or(RefundError::NotRefundable("not an escrowed payment"))?;
            self.units(escrow.refundable())
        };
        let e = decided
            .escrow
            .as_mut()
            .ok_or(RefundError::NotRefundable("not an escrowed payment"))?;
        // Sent as a known transaction: its own outcome decides (a node may answer reads with
        // its pending block, so the escrow's figures could show a refund not mined yet). Not
        // mined, it is waited for and never sent again.
        if let Some(tx) = pending.transaction.as_deref().and_then(|t| t.parse().ok()) {
            match chain
                .transaction_outcome(self.chain_id, tx)
                .await
                .map_err(|e| RefundError::ChainDown(e.to_string()))?
            {
                TxOutcome::NotMined => return Err(RefundError::Pending),
                TxOutcome::Succeeded => e.refunds.push(pending.clone()),
                TxOutcome::Reverted => {}
            }
            e.pending_refund = None;
            return Ok(decided);
        }
        // No transaction known (a crash between writing it pending and recording it): once
        // its sender has nothing waiting to be mined, the escrow's figures say whether it
        // landed; until then it may still land, and nothing is sent again.
        if let Some(sender) = pending
            .sender
            .as_deref()
            .and_then(paygate_x402::address::parse_address)
        {
            let waiting = chain
                .has_unmined(self.chain_id, sender)
                .await
                .map_err(|e| RefundError::ChainDown(e.to_string()))?;
            if waiting {
                return Err(RefundError::Pending);
            }
        }
        let hash = auth_capture::payment_hash(self.chain_id, &self.info);
        let state = auth_capture::read_state(chain, self.chain_id, hash)
            .await
            .map_err(|e| RefundError::ChainDown(e.to_string()))?;
        if state.refundable + self.units(pending.amount) == before {
            e.refunds.push(pending.clone());
        } else if state.refundable != before {
            return Err(RefundError::ChainDown(format!(
                "the escrow's refundable amount ({}) matches neither outcome of the pending refund",
                state.refundable
            )));
        }
        e.pending_refund = None;
        Ok(decided)
    }
}
