//! The per-request state Pingora hands every phase.

use crate::decide::{Forwarding, Stage};
use paygate_gateway::metrics::Outcome;
use paygate_gateway::payments::way::Receipt;
use std::sync::Arc;
use std::time::Instant;

/// Per-request state.
pub struct Ctx {
    pub(crate) request_id: String,
    pub(crate) start: Instant,
    pub(crate) stage: Stage,
    /// A `/gateway/` request (CORS headers, metrics).
    pub(crate) gateway: bool,
    /// The outcome's name for the access log, once known.
    pub(crate) outcome: Option<&'static str>,
    /// The outcome for the counters.
    pub(crate) kind: Outcome,
    /// The organisation and route the request addressed, once known (metrics).
    pub(crate) org_id: Option<Arc<str>>,
    pub(crate) route_id: Option<Arc<str>>,
}

impl Ctx {
    /// The receipt the answer to this request carries, once known.
    pub(crate) fn receipt(&self) -> Option<&Receipt> {
        match &self.stage {
            Stage::Forwarding(f) => f.receipt.as_ref(),
            _ => None,
        }
    }

    pub(crate) fn forwarding(&mut self) -> Option<&mut Forwarding> {
        match &mut self.stage {
            Stage::Forwarding(f) => Some(f),
            _ => None,
        }
    }
}
