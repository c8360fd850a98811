//! The sandbox signing as Circle's Payments Network does: its notifications and the key it
//! serves by id.

use super::*;

/// The CPN notification of one scripted event.
pub(super) fn notification(o: &Outgoing, payout: &SbPayout, at: &str) -> Vec<u8> {
    let (kind, status) = match o.event {
        EventType::PaymentCompleted => ("cpn.payment.completed", "COMPLETED"),
        EventType::PaymentFailed => ("cpn.payment.failed", "FAILED"),
        EventType::ComplianceHold => ("cpn.payment.inManualReview", "CREATED"),
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
