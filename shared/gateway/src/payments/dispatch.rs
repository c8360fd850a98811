//! The payment service's two calls, dispatched to the scheme a payment is in (`schemes.rs`:
//! `exact`, `batch-settlement`; `upto.rs`), and an access window's call given back when the
//! origin did not serve it.

use super::schemes::{
    Admission, Admitted, Answered, Batch, Exact, Gate, PaidRequest, Receipt, Scheme, Unadmitted,
};
use super::upto::Upto;
use super::{PaymentService, Refusal};

impl PaymentService {
    /// Admits a paid request (the payment header's JSON in `req`) by the scheme its payment is
    /// in: checked, and taken (`exact`) or held (a channel voucher), with the caller's own
    /// checks asked through `gate`. On success the request is to be forwarded to the admission's
    /// upstream, then [`Self::finish`]ed.
    pub async fn admit<G: Gate>(
        &self,
        req: &PaidRequest<'_>,
        gate: &G,
    ) -> Result<Admission, Unadmitted<G::Stop>> {
        let batch = Batch(self);
        if let Some(payload) = batch.payload(req) {
            return batch.admit(req, payload, gate).await;
        }
        let upto = Upto(self);
        if let Some(payload) = upto.payload(req) {
            return upto.admit(req, payload, gate).await;
        }
        // Every other payment is `exact`'s: its decoder says what is wrong with it.
        Exact(self).admit(req, (), gate).await
    }

    /// What the answer commits for the payment in `slot` (taken once its scheme is done with
    /// it): called with the answer's head, then with its end. A channel voucher is charged here
    /// (its receipt returned for the answer's head); an `exact` payment's plan slot, upstream
    /// status and kept answer are recorded at the end.
    pub async fn finish(
        &self,
        slot: &mut Option<Admitted>,
        answered: Answered<'_>,
    ) -> Result<Option<Receipt>, Refusal> {
        match slot {
            Some(Admitted::Exact(_)) => Exact(self).finish(slot, answered).await,
            Some(Admitted::Channel(_)) => Batch(self).finish(slot, answered).await,
            Some(Admitted::Upto(_)) => Upto(self).finish(slot, answered).await,
            Some(Admitted::Window(_)) => {
                let unserved = match answered {
                    Answered::Head { status, .. } => status >= 400,
                    Answered::End {
                        upstream_status, ..
                    } => upstream_status.is_none_or(|s| s >= 400),
                };
                if let (Some(Admitted::Window(w)), Some(windows)) = (slot.take(), &self.windows()) {
                    if unserved {
                        windows.give_back(&w).await;
                    }
                }
                Ok(None)
            }
            None => Ok(None),
        }
    }
}
