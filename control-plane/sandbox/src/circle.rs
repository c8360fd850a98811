//! The sandbox signing as Circle's Payments Network does: its notifications and the key it
//! serves by id.

use crate::provider::*;

/// The CPN notification of one scripted event.
pub(super) fn notification(o: &Outgoing, payout: &SbPayout, at: &str) -> Vec<u8> {
    if let Some(body) = rfi_notification(o, payout, at) {
        return body;
    }
    let (kind, status) = match o.event {
        EventType::PaymentCompleted => ("cpn.payment.completed", "COMPLETED"),
        EventType::PaymentFailed => ("cpn.payment.failed", "FAILED"),
        EventType::ComplianceHold => ("cpn.payment.inManualReview", "CREATED"),
        EventType::Progress if o.status == "delayed" => {
            ("cpn.payment.delayed", "FIAT_PAYMENT_INITIATED")
        }
        EventType::Progress => ("cpn.payment.fiatPaymentInitiated", "FIAT_PAYMENT_INITIATED"),
    };
    let failed = o.event == EventType::PaymentFailed;
    let payment = cpn::PaymentWire {
        id: payout.id.clone(),
        status: status.into(),
        update_date: Some(at.into()),
        failure_reason: failed.then(|| "BANK_VERIFICATION_FAILED".into()),
        failure_code: failed.then(|| "PM02001".into()),
        source_amount: None,
        customer_ref_id: None,
        refund: payout
            .funding
            .as_ref()
            .filter(|f| failed && f.returned)
            .map(|f| cpn::RefundWire {
                transaction_hash: f.returned_transaction.clone(),
                amount: cpn::AmountWire {
                    amount: f.amount.clone(),
                    currency: "USD".into(),
                },
            }),
    };
    cpn::payment_notification(kind, &o.notification_id, &payment, at)
}

/// `GET /v2/cpn/notifications/publicKey/{keyId}`: the signing key, as CPN serves its own.
pub(super) async fn public_key(State(s): State<Shared>, Path(key_id): Path<String>) -> Response {
    use p256::pkcs8::EncodePublicKey as _;
    let Some((id, key)) = s.signer.as_ref().filter(|(id, _)| *id == key_id) else {
        return err(StatusCode::NOT_FOUND, "no such key");
    };
    let Ok(der) = key.verifying_key().to_public_key_der() else {
        return internal("encoding the key");
    };
    Json(cpn::PublicKeyAnswer {
        data: cpn::PublicKeyWire {
            id: id.clone(),
            algorithm: cpn::ALGORITHM.into(),
            public_key: base64::engine::general_purpose::STANDARD.encode(der.as_bytes()),
        },
    })
    .into_response()
}

/// An RFI's notification (`rfi_*` scripted statuses), the RFI as it stands at that step.
fn rfi_notification(o: &Outgoing, payout: &SbPayout, at: &str) -> Option<Vec<u8>> {
    let (kind, status) = match o.status.as_str() {
        "rfi_required" => ("cpn.rfi.informationRequired", "INFORMATION_REQUIRED"),
        "rfi_in_review" => ("cpn.rfi.inReview", "IN_REVIEW"),
        "rfi_approved" => ("cpn.rfi.approved", "APPROVED"),
        _ => return None,
    };
    let mut rfi = payout.rfi.clone()?;
    rfi.status = status.into();
    let w = cpn::NotificationWire {
        subscription_id: "00000000-0000-4000-8000-000000000000".into(),
        notification_id: o.notification_id.clone(),
        notification_type: kind.into(),
        notification: serde_json::to_value(&rfi).unwrap_or_default(),
        timestamp: at.into(),
        version: serde_json::Number::from(2),
    };
    Some(serde_json::to_vec(&w).unwrap_or_default())
}
