//! Access windows (route `accessWindowSeconds`): a settled `exact` payment opens its payer's
//! window on the route (`paid_for`); within it the payer is served by signing in
//! (`SIGN-IN-WITH-X`) instead of paying, each call counted and given back when the origin did
//! not serve it. Every `402` of such a route declares a fresh sign-in (nonce, time). The rules
//! and the store's part are `crate::windows` and `paygate_domain::window`.

use crate::payments::way::Payments;
use crate::payments::way::{
    Admission, Admitted, Claim, Ended, Gate, Held, PaidRequest, Parts, Paying, Receipt, Serving,
    Step, Unadmitted, Way,
};
use crate::payments::Refusal;
use crate::route_entry::RouteEntry;
use crate::windows::Windows;
use http::HeaderValue;
use paygate_domain::model::GatewayPayment;
use paygate_domain::window::AccessWindow;
use paygate_x402::payment::ProtocolVersion;
use paygate_x402::siwx;
use paygate_x402::Extensions;
use std::sync::Arc;

pub(crate) struct Window;

/// Access windows as served: the windows' store and sign-in rules.
struct Windowed {
    windows: Arc<Windows>,
}

/// Whether `entry` serves access windows.
fn serves(entry: &RouteEntry) -> bool {
    !entry.sandbox && entry.route.access_window_seconds.is_some()
}

#[async_trait::async_trait]
impl Way for Window {
    fn build(&self, parts: &Parts) -> Option<Box<dyn Serving>> {
        Some(Box::new(Windowed {
            windows: parts.windows.clone()?,
        }))
    }
}

#[async_trait::async_trait]
impl Serving for Windowed {
    fn claims(&self, req: &PaidRequest<'_>) -> Option<Claim> {
        // A call that signs in instead of paying settles nothing: served whatever the
        // network's facilitator is doing.
        // The route's own facts first: most routes have no window, and their requests are
        // never looked at for a sign-in.
        let signs_in = || req.headers.contains_key(siwx::EXTENSION) && req.payment().is_none();
        (serves(req.entry) && signs_in()).then_some(Claim::Unpaid)
    }

    fn declares_fresh(&self, entry: &RouteEntry) -> bool {
        serves(entry)
    }

    fn declare_fresh(&self, entry: &RouteEntry, ext: &mut Extensions) {
        if let Some((req, _)) = &entry.payment {
            ext.sign_in_with_x = Some(self.windows.declaration(req));
        }
    }

    /// Opens the payer's window on `entry`'s route once `record` was settled for it (before
    /// its request is forwarded); nothing for a route without a window.
    async fn paid_for(&self, entry: &RouteEntry, record: &GatewayPayment) {
        if serves(entry) {
            self.windows.open(entry, record).await;
        }
    }

    /// The route's limits and body size first, the upstream found, then the window serves the
    /// call (counted, the nonce spent) or the sign-in is refused with why.
    async fn admit(
        &self,
        svc: &Payments,
        p: &Paying<'_>,
        gate: &dyn Gate,
    ) -> Result<Admission, Unadmitted> {
        let req = p.req;
        let refused = |r: Refusal| svc.refused(req.entry, r, ProtocolVersion::V2).into();
        let proof = req.headers.get(siwx::EXTENSION).map(|v| v.as_bytes());
        let Some(proof) = proof else {
            return Err(refused(Refusal::Internal));
        };
        gate.paying().map_err(refused)?;
        let upstream = gate.upstream(false).await.map_err(refused)?;
        let window = self
            .windows
            .sign_in(req.org_id, &req.entry.route.id, p.requirements, proof)
            .await
            .map_err(|r| refused(r.into()))?;
        if let Some(payer) = paygate_x402::address::parse_address(&window.payer) {
            gate.payer(&payer).map_err(refused)?;
        }
        let held = WindowHeld {
            windows: self.windows.clone(),
            network: p.requirements.network_name(ProtocolVersion::V2),
            resource: p.requirements.resource.clone(),
            window,
        };
        let receipt = held.receipt(None);
        Ok(Admission {
            upstream,
            payment: Admitted(Box::new(held)),
            receipt: Some(receipt),
        })
    }
}

/// A call served through the payer's access window, counted at admission; given back if the
/// origin does not serve it (no answer, or 400 and above), as a voucher is not charged.
struct WindowHeld {
    windows: Arc<Windows>,
    window: AccessWindow,
    /// The network (CAIP-2) and resource its receipt names.
    network: String,
    resource: String,
}

impl WindowHeld {
    async fn give_back(&self) {
        self.windows.give_back(&self.window).await;
    }

    /// The call's receipt, with `signed` (the deployment's signed receipt) once it is served.
    fn receipt(&self, signed: Option<serde_json::Value>) -> Receipt {
        Receipt {
            header: "payment-response",
            value: crate::windows::receipt(&self.window, &self.network, signed),
            charged: 0,
        }
    }
}

#[async_trait::async_trait]
impl Held for WindowHeld {
    fn label(&self) -> &'static str {
        "ACCESS_WINDOW"
    }

    fn counts_as_paid(&self) -> bool {
        false
    }

    /// Served (below 400): the receipt, now signed where the deployment signs receipts (a call
    /// the origin failed was given back: its receipt stays unsigned).
    async fn head(&mut self, svc: &Payments, status: u16, _: Option<&HeaderValue>) -> Step {
        if status >= 400 {
            self.give_back().await;
            return Step::Done(None);
        }
        let signed = svc.receipt_extension(&self.network, &self.resource, &self.window.payer, "");
        Step::Done(signed.is_some().then(|| self.receipt(signed)))
    }

    async fn end(self: Box<Self>, _svc: &std::sync::Arc<Payments>, end: Ended) -> Option<Receipt> {
        if end.upstream_status.is_none_or(|s| s >= 400) {
            self.give_back().await;
        }
        None
    }
}
