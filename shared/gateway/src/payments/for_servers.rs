//! A call of another x402 server through the facilitator API (`/facilitator/*`), as the ways of
//! paying read it, and the answers they give; the door that hands it to the way its scheme names
//! is the registry's ([`super::way::Payments::verify_for_server`]).

use super::{PaymentService, Refusal};
use paygate_x402::facilitator::wire::{FacilitatorRequest, SettleResponse, VerifyResponse};
use paygate_x402::payment::ProtocolVersion;
use paygate_x402::PaymentRequirements;
use std::sync::Arc;

/// One call of another x402 server.
pub struct ForServer<'a> {
    /// The calling organisation: a settlement is recorded under it.
    pub org_id: &'a Arc<str>,
    pub req: &'a FacilitatorRequest,
    pub version: ProtocolVersion,
}

impl ForServer<'_> {
    /// The scheme the caller's requirements name.
    pub fn scheme(&self) -> &str {
        self.req.payment_requirements["scheme"]
            .as_str()
            .unwrap_or_default()
    }

    /// The network as the caller spelled it, echoed in answers.
    pub fn network(&self) -> String {
        self.req.payment_requirements["network"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The payment payload's `payload` (the scheme's own object).
    pub fn payload(&self) -> &serde_json::Value {
        self.req
            .payment_payload
            .get("payload")
            .unwrap_or(&self.req.payment_payload)
    }

    /// The caller's requirements for `scheme`, read as this deployment's networks know them.
    pub(crate) fn requirements(
        &self,
        svc: &PaymentService,
        scheme: &str,
    ) -> Result<PaymentRequirements, Refusal> {
        PaymentRequirements::from_wire_as(
            &self.req.payment_requirements,
            self.version,
            svc.settleable.networks(),
            scheme,
        )
        .map_err(|e| Refusal::Invalid(e.reason()))
    }

    /// The payment payload, decoded in the caller's version.
    pub(crate) fn payment(&self) -> Result<paygate_x402::payment::PaymentPayload, Refusal> {
        let json = serde_json::to_vec(&self.req.payment_payload).unwrap_or_default();
        Ok(paygate_x402::payment::PaymentPayload::from_json(
            &json,
            self.version,
        )?)
    }
}

/// A verdict: valid for `payer`, or not for `reason`.
pub(crate) fn verdict(payer: Option<String>, reason: Option<&str>) -> VerifyResponse {
    VerifyResponse {
        is_valid: reason.is_none(),
        invalid_reason: reason.map(str::to_string),
        payer,
        extra: None,
    }
}

/// A settlement refused for `reason`: nothing moved.
pub(crate) fn failed(reason: &str, network: String, payer: Option<String>) -> SettleResponse {
    SettleResponse {
        success: false,
        error_reason: Some(reason.to_string()),
        error_message: None,
        transaction: String::new(),
        network,
        payer,
        amount: None,
        extra: None,
        extensions: None,
    }
}

/// The settle answer for `record`, settled under `req` (its amount in the token's units).
pub(crate) fn succeeded(
    call: &ForServer<'_>,
    req: &PaymentRequirements,
    record: &paygate_domain::model::GatewayPayment,
) -> SettleResponse {
    SettleResponse {
        success: true,
        error_reason: None,
        error_message: None,
        transaction: record.transaction.clone().unwrap_or_default(),
        network: call.network(),
        payer: Some(record.payer.clone()),
        amount: Some(req.token_units(record.amount).to_string()),
        extra: None,
        extensions: None,
    }
}

/// Reserves `record`'s nonce for another server's settlement under `req`: `None` to settle it;
/// the settled payment when the same settlement is asked again (its answer lost; `same` says
/// whether a settled record is this settlement); refused while it is being settled, or as a
/// replay.
pub(crate) async fn reserve_for(
    svc: &PaymentService,
    call: &ForServer<'_>,
    record: &mut paygate_domain::model::GatewayPayment,
    req: &PaymentRequirements,
    same: impl Fn(&paygate_domain::model::GatewayPayment) -> bool,
) -> Result<Option<paygate_domain::model::GatewayPayment>, Refusal> {
    let charge = super::Charge {
        org_id: call.org_id,
        route_id: paygate_domain::model::FACILITATOR_API_ROUTE,
        requirements: req,
        plan_limit: None,
        redeliver: false,
    };
    match svc.reserve(record, &charge).await? {
        super::Reserve::Fresh(_) => Ok(None),
        super::Reserve::Held(held, _) if held.status.is_open() => Err(Refusal::StillSettling),
        super::Reserve::Held(held, _)
            if held.status == paygate_domain::model::PaymentStatus::Settled
                && held.org_id == record.org_id
                && same(&held) =>
        {
            Ok(Some(*held))
        }
        super::Reserve::Held(..) => Err(Refusal::Rejected(
            paygate_x402::verify::Rejection::NonceReplay,
        )),
    }
}
