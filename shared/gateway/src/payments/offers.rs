//! Signed offers (x402 `offer-and-receipt`), with the deployment's receipt key: every `402`
//! declares `extensions["offer-receipt"]`
//! with one offer per `accepts` entry, signed with the deployment's receipt key and valid for
//! the route's `maxTimeoutSeconds`. A `402` signs nothing itself: a route's offers (and, for a
//! challenge rendered once, the whole challenge) are kept and signed again once half their
//! validity is gone, or when the route changes. Receipts are `receipts.rs`.

use crate::route_entry::RouteEntry;
use alloy_signer_local::PrivateKeySigner;
use paygate_x402::{Challenge, PaymentRequirements};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A route's signed offers, and its challenge rendered with them.
#[derive(Clone)]
struct Signed {
    /// The route's `updatedAt` when signed.
    version: String,
    valid_until: u64,
    declaration: Arc<serde_json::Value>,
    challenge: Option<Challenge>,
}

pub(crate) struct Offers {
    key: Arc<PrivateKeySigner>,
    /// By route id; a changed route (another `updatedAt`) is signed again.
    kept: Mutex<HashMap<String, Signed>>,
}

impl Offers {
    pub(crate) fn new(key: Arc<PrivateKeySigner>) -> Self {
        Self {
            key,
            kept: Mutex::new(HashMap::new()),
        }
    }

    /// The challenge of `entry` with its signed offers. `fresh`: the challenge is rendered
    /// for every `402` anyway (a way declares afresh); else the rendered one is kept with the
    /// offers. `render` renders it with the offers' declaration.
    pub(crate) fn challenge(
        &self,
        entry: &RouteEntry,
        req: &PaymentRequirements,
        offered: &Challenge,
        fresh: bool,
        render: impl Fn(serde_json::Value) -> Challenge,
    ) -> Challenge {
        let now = paygate_domain::unix_now();
        let validity = req.max_timeout_seconds.max(2);
        let route = &entry.route;
        let valid =
            |s: &Signed| s.version == route.updated_at && s.valid_until > now + validity / 2;
        let mut declaration = None;
        if let Ok(k) = self.kept.lock() {
            if let Some(s) = k.get(route.id.as_str()).filter(|s| valid(s)) {
                match (&s.challenge, fresh) {
                    (Some(c), false) => return c.clone(),
                    _ => declaration = Some((s.valid_until, s.declaration.clone())),
                }
            }
        }
        let reused = declaration.is_some();
        let (valid_until, declaration) = declaration.unwrap_or_else(|| {
            let until = now + validity;
            let offers = paygate_x402::offer_receipt::signed_offers(
                &self.key,
                &req.resource,
                &req.accepts_v2(&offered.offer),
                until,
            );
            (until, Arc::new(offers))
        });
        let challenge = render((*declaration).clone());
        if fresh && reused {
            // Rendered for this `402` alone; the offers kept are still good.
            return challenge;
        }
        let kept = Signed {
            version: route.updated_at.clone(),
            valid_until,
            declaration,
            challenge: (!fresh).then(|| challenge.clone()),
        };
        self.keep(route.id.clone(), kept, now);
        challenge
    }

    /// Keeps `signed` for `id`, dropping what has expired.
    fn keep(&self, id: String, signed: Signed, now: u64) {
        if let Ok(mut k) = self.kept.lock() {
            k.retain(|_, s| s.valid_until > now);
            k.insert(id, signed);
        }
    }
}
