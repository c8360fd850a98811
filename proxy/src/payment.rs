//! Taking a payment on the hot path: decode, verify locally, reserve the nonce durably, settle
//! through the facilitator, and answer every failure with the right status (402 only when the
//! caller must sign a new payment; 5xx when the outcome is not the caller's fault).

use crate::{Ctx, Gateway, Paid};
use base64::Engine;
use bytes::Bytes;
use paygate_shared::facilitator::wire::SettleResponse;
use paygate_shared::facilitator::{settle_reserved, FacilitatorError, PaymentRequest};
use paygate_shared::model::{GatewayPayment, PaymentStatus};
use paygate_shared::route_table::RouteEntry;
use paygate_shared::store::PaymentReservation;
use paygate_shared::usage::Slot;
use paygate_shared::x402::payment::{PaymentPayload, ProtocolVersion};
use paygate_shared::x402::verify::{self, Rejection};
use paygate_shared::x402::{Challenge, PaymentRequirements};
use paygate_shared::{unix_now, ErrorBody, ErrorCode};
use pingora::prelude::*;
use pingora::proxy::Session;
use std::net::SocketAddr;
use std::time::Instant;

impl Gateway {
    /// Decodes and verifies the payment, checks the upstream address and takes a plan slot (so
    /// nothing is charged for a request that cannot be served), then reserves the nonce and
    /// settles. Returns the settled payment with the upstream address and the slot, or `None`
    /// once an answer has been written.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn take_payment(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        entry: &RouteEntry,
        req: &PaymentRequirements,
        challenge: &Challenge,
        version: ProtocolVersion,
        raw: &[u8],
        plan_limit: u64,
    ) -> Result<Option<(Paid, SocketAddr, Slot)>> {
        let payment = match PaymentPayload::decode(raw, version) {
            Ok(p) => p,
            Err(e) => {
                Self::respond_error(session, ctx, ErrorCode::InvalidPayment, &e.to_string())
                    .await?;
                return Ok(None);
            }
        };
        let Ok(auth) = payment.authorization() else {
            Self::respond_error(
                session,
                ctx,
                ErrorCode::InvalidPayment,
                "malformed authorization",
            )
            .await?;
            return Ok(None);
        };
        let t0 = Instant::now();
        if let Err(rejection) = verify::verify(&payment, &auth, req, unix_now()) {
            Self::reject(session, ctx, req, challenge, rejection).await?;
            return Ok(None);
        }
        let verify_us = t0.elapsed().as_micros() as u64;
        let Some(facilitator) = &self.facilitator else {
            Self::respond_error(
                session,
                ctx,
                ErrorCode::FacilitatorUnavailable,
                "payments cannot be settled: no facilitator is configured",
            )
            .await?;
            return Ok(None);
        };
        let Some(addr) = self.checked_upstream(session, ctx, entry).await? else {
            return Ok(None);
        };
        let Some(slot) = self.plan_slot(session, ctx, plan_limit).await? else {
            return Ok(None);
        };

        let mut record =
            GatewayPayment::reserved(&entry.route.org_id, &entry.route.id, req, &auth, verify_us);
        match self.store.reserve_payment(&record).await {
            Ok(PaymentReservation::Reserved) => {}
            Ok(PaymentReservation::Held(held)) => {
                return match self
                    .retried(session, ctx, req, challenge, &record, *held)
                    .await?
                {
                    Some(redeemed) => Ok(Some((paid(version, req, redeemed), addr, slot))),
                    None => Ok(None),
                };
            }
            Err(e) => {
                tracing::error!(error = %e, "could not reserve payment nonce");
                Self::respond_error(session, ctx, ErrorCode::InternalError, "internal error")
                    .await?;
                return Ok(None);
            }
        }

        let preq = PaymentRequest {
            payment: &payment,
            auth: &auth,
            requirements: req,
        };
        match settle_reserved(
            self.store.as_ref(),
            facilitator.as_ref(),
            &mut record,
            &preq,
        )
        .await
        {
            Ok(_) => {
                tracing::info!(payment = %record.id, settle_ms = record.settle_ms, "payment settled");
                Ok(Some((paid(version, req, record), addr, slot)))
            }
            Err(FacilitatorError::Rejected(rejection)) => {
                Self::reject(session, ctx, req, challenge, rejection).await?;
                Ok(None)
            }
            Err(FacilitatorError::Unavailable(msg)) => {
                tracing::warn!(payment = %record.id, error = %msg, "facilitator unavailable");
                Self::respond_error(
                    session,
                    ctx,
                    ErrorCode::FacilitatorUnavailable,
                    "the payment could not be settled now; nothing was charged, retry later",
                )
                .await?;
                Ok(None)
            }
            Err(FacilitatorError::Ambiguous(_)) => {
                Self::respond_error(
                    session,
                    ctx,
                    ErrorCode::SettlementPending,
                    "settlement outcome is not known yet; do not pay again, it is being reconciled",
                )
                .await?;
                Ok(None)
            }
        }
    }

    /// A verified payment whose nonce `held` already reserved: the same signed payment again.
    /// Still settling (a crash or a timeout left it `RESERVED`/`UNKNOWN`, or a concurrent
    /// duplicate is settling it): `504 SETTLEMENT_PENDING`, so the client retries later instead
    /// of paying twice. Settled by reconciliation, so never served: this retry claims it (at most
    /// one does) and is served. Anything else is a replay (`402 NONCE_REPLAY`).
    async fn retried(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        req: &PaymentRequirements,
        challenge: &Challenge,
        retry: &GatewayPayment,
        held: GatewayPayment,
    ) -> Result<Option<GatewayPayment>> {
        if matches!(
            held.status,
            PaymentStatus::Reserved | PaymentStatus::Unknown
        ) {
            Self::respond_error(
                session,
                ctx,
                ErrorCode::SettlementPending,
                "this payment is still being settled; do not pay again, retry it later",
            )
            .await?;
            return Ok(None);
        }
        let claimed = if held.redeemable_by(retry) {
            let now = paygate_shared::now_rfc3339();
            self.store.claim_redemption(&held.id, retry, &now).await
        } else {
            Ok(None)
        };
        match claimed {
            Ok(Some(claimed)) => {
                tracing::info!(payment = %claimed.id, "reconciled payment redeemed by its retry");
                Ok(Some(claimed))
            }
            Ok(None) => {
                Self::reject(session, ctx, req, challenge, Rejection::NonceReplay).await?;
                Ok(None)
            }
            Err(e) => {
                tracing::error!(error = %e, "could not claim a reconciled payment");
                Self::respond_error(session, ctx, ErrorCode::InternalError, "internal error")
                    .await?;
                Ok(None)
            }
        }
    }

    /// `402` with the challenge again, naming why the payment was not accepted.
    async fn reject(
        session: &mut Session,
        ctx: &mut Ctx,
        req: &PaymentRequirements,
        challenge: &Challenge,
        rejection: Rejection,
    ) -> Result<()> {
        let code = if rejection == Rejection::NonceReplay {
            ErrorCode::NonceReplay
        } else {
            ErrorCode::PaymentRejected
        };
        ctx.outcome = Some(code.as_str());
        ctx.kind = paygate_shared::metrics::Outcome::Rejected;
        let message = rejection.to_string();
        let mut body = ErrorBody::new(code, &message, &ctx.request_id).to_value();
        body["x402Version"] = 1.into();
        body["error"] = rejection.reason().into();
        body["accepts"] = serde_json::json!([req.to_v1()]);
        let with_reason = Challenge::render(req, rejection.reason());
        let challenge = Challenge {
            requirements_header: challenge.requirements_header.clone(),
            payment_required_header: with_reason.payment_required_header,
            body: Bytes::new(),
        };
        let body = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
        Self::write_402(session, ctx, &challenge, body).await
    }
}

/// The settled `record` as the request's payment, with the receipt header for `version`
/// (`transaction` is empty only for a payment reconciliation found settled, which knows the
/// transfer happened but not its transaction).
fn paid(version: ProtocolVersion, req: &PaymentRequirements, record: GatewayPayment) -> Paid {
    let network = match version {
        ProtocolVersion::V1 => req.network.v1_name.clone(),
        ProtocolVersion::V2 => req.network.caip2.clone(),
    };
    let receipt = SettleResponse {
        success: true,
        error_reason: None,
        transaction: record.transaction.clone().unwrap_or_default(),
        network,
        payer: Some(record.payer.clone()),
    };
    let receipt = base64::engine::general_purpose::STANDARD
        .encode(serde_json::to_vec(&receipt).unwrap_or_default());
    Paid {
        receipt_header: version.receipt_header(),
        receipt,
        record,
    }
}
