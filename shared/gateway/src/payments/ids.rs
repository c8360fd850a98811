//! x402's `payment-identifier` extension: a client names a payment with an id of its own
//! (`extensions["payment-identifier"].info.id`, 16 to 128 of `[A-Za-z0-9_-]`), and a retry of
//! the same payment under the same id gets the first answer back (status, body, receipt)
//! without paying again, for [`PAYMENT_ID_WINDOW_SECS`] and across restarts (the record is in
//! the store). The same id with another payment is `409 PAYMENT_ID_CONFLICT`. The id is read
//! only after the payment's signature is verified, so nothing is stored for a forged one.

use super::{PaymentService, Refusal, Verified};
use paygate_domain::model::{PaidAnswer, PaymentIdRecord};
use paygate_x402::payment::PaymentPayload;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// How long an identifier and its answer are kept: a retry later than this pays again.
pub const PAYMENT_ID_WINDOW_SECS: i64 = 24 * 3600;

/// A payment's identifier, claimed for it: where its answer is kept.
#[derive(Debug, Clone)]
pub struct PaymentKey {
    record: PaymentIdRecord,
}

/// What an identifier decides before a payment is taken.
pub enum IdClaim {
    /// No identifier, or one claimed now (or held by this same payment, not yet answered):
    /// take the payment; keep the answer under the key when there is one.
    Take(Option<PaymentKey>),
    /// The same payment was answered before: that answer, nothing is taken.
    Answered(PaidAnswer),
}

/// The id a payload names, if any; a malformed one is refused like a malformed payment.
fn id_of(payment: &PaymentPayload) -> Result<Option<String>, Refusal> {
    let PaymentPayload::V2(p) = payment else {
        return Ok(None);
    };
    let Some(info) = p
        .extensions
        .as_ref()
        .and_then(|e| e.get(paygate_x402::extensions::PAYMENT_IDENTIFIER))
        .and_then(|x| x.get("info"))
    else {
        return Ok(None);
    };
    match info.get("id") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(id))
            if (16..=128).contains(&id.len())
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') =>
        {
            Ok(Some(id.clone()))
        }
        Some(_) => Err(Refusal::BadPaymentId),
    }
}

impl PaymentService {
    /// Looks the payment's identifier up, and claims it when free: see [`IdClaim`].
    pub async fn claim_id(&self, org_id: &str, verified: &Verified) -> Result<IdClaim, Refusal> {
        let Some(key) = id_of(&verified.payment)? else {
            return Ok(IdClaim::Take(None));
        };
        let a = &verified.auth;
        let fingerprint = hex::encode(Sha256::digest(
            [
                a.from.as_slice(),
                a.to.as_slice(),
                a.nonce.as_slice(),
                &a.value.to_be_bytes::<32>(),
                &a.signature,
            ]
            .concat(),
        ));
        let now = paygate_domain::unix_now() as i64;
        let record = PaymentIdRecord {
            org_id: org_id.to_string(),
            key,
            fingerprint,
            created_at_unix: now,
            result: None,
        };
        let held = self
            .store
            .claim_payment_id(&record, now - PAYMENT_ID_WINDOW_SECS)
            .await
            .map_err(|e| Refusal::store(&e, "payment identifier unavailable"))?;
        match held {
            None => Ok(IdClaim::Take(Some(PaymentKey { record }))),
            Some(h) if h.fingerprint != record.fingerprint => Err(Refusal::PaymentIdConflict),
            Some(PaymentIdRecord {
                result: Some(answer),
                ..
            }) => Ok(IdClaim::Answered(answer)),
            // The same payment, not answered yet (in flight, or a crash came first): the
            // payment step answers by the payment's own record (settling, replay, redelivery).
            Some(h) => Ok(IdClaim::Take(Some(PaymentKey { record: h }))),
        }
    }

    /// Keeps the answer a paid request got under its identifier (in the background).
    pub fn keep_answer(&self, key: PaymentKey, answer: PaidAnswer) {
        let mut record = key.record;
        record.result = Some(answer);
        let store = self.store.clone();
        tokio::spawn(async move {
            if let Err(e) = store.put_payment_id(&record).await {
                tracing::warn!(error = %e, key = %record.key, "could not keep a paid answer");
            }
        });
    }
}
