//! Reconciliation of payments whose settlement outcome is not recorded: `Unknown` (the transfer
//! was sent, the receipt never came) and `Reserved` left behind by a crash. The chain decides:
//! `authorizationState(from, nonce)` on the token (Permit2's `nonceBitmap` bit for a Permit2 or
//! `upto` payment) true means the money moved (`Settled`); false after the
//! authorization's `validBefore` means it never can (`Failed`, the nonce stays reserved); false
//! before it means a transaction may still land, so the payment waits for the next pass
//! ([`OnChain::by_authorization`], shared by the ways that settle one authorization). An `auth-capture`
//! payment is decided by the escrow's state instead (its way voids what a crash left held). A
//! payment closed `Failed` gives back the plan slot its record names (taken in the store on a
//! cluster, with the reservation).

use super::way::OnChain;
use paygate_domain::model::{GatewayPayment, PaymentStatus};
use paygate_domain::StoreError;
use paygate_store::Store;
use paygate_x402::facilitator::ChainCalls;
use paygate_x402::network::Networks;
use time::OffsetDateTime;

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReconcileReport {
    pub settled: usize,
    pub failed: usize,
    pub waiting: usize,
    /// The payments this pass recorded, as recorded (the caller audits them against the chain).
    pub decided: Vec<GatewayPayment>,
}

fn created(p: &GatewayPayment) -> OffsetDateTime {
    OffsetDateTime::parse(
        &p.created_at,
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// How long a payment may still belong to the request that took it, in seconds.
#[derive(Debug, Clone, Copy)]
pub struct Leases {
    /// A payment settling on the hot path
    /// ([`paygate_config::FacilitatorConfig::in_flight`]).
    pub in_flight_secs: i64,
    /// A payment its way holds while the origin answers (an `auth-capture` hold before its
    /// capture: [`paygate_config::FacilitatorConfig::live_hold_seconds`]).
    pub live_hold_secs: i64,
}

/// One pass over unfinished payments, each decided by the way of paying that left it
/// ([`Way::reconcile`](super::way::Way)). Payments created within their lease (`leases`) after
/// `started` (by this process, or by another node of a cluster, which may still be answering)
/// are left alone; a crashed process's are taken at once on its restart, another node's once
/// their lease ran out. The comparison keeps the records' sub-second precision: a process
/// restarted within the second it crashed in must still treat the crashed process's
/// reservations as left behind. `chain`: the relayer's contract calls (the escrow's void),
/// where this deployment has them.
pub async fn reconcile_once(
    store: &dyn Store,
    events: Option<&std::sync::Arc<crate::events::Events>>,
    networks: &Networks,
    chain: Option<&dyn ChainCalls>,
    started: OffsetDateTime,
    leases: Leases,
) -> Result<ReconcileReport, StoreError> {
    let now_t = OffsetDateTime::now_utc();
    let now = now_t.unix_timestamp().max(0) as u64;
    let mut report = ReconcileReport::default();
    for p in store.unfinished_payments().await? {
        let Some(way) = super::registry::reconciler(&p) else {
            tracing::warn!(payment = %p.id, "cannot reconcile: no way of paying reconciles it");
            report.waiting += 1;
            continue;
        };
        let created = created(&p);
        let in_flight = match way.holds_while_answered() {
            true => leases.in_flight_secs.max(leases.live_hold_secs),
            false => leases.in_flight_secs,
        };
        if created >= started && (now_t - created).whole_seconds() < in_flight {
            report.waiting += 1;
            continue;
        }
        let Some(network) = networks.resolve(&p.network) else {
            tracing::warn!(payment = %p.id, network = %p.network, "cannot reconcile: unknown network");
            report.waiting += 1;
            continue;
        };
        if network.config.rpc_url.is_empty() {
            report.waiting += 1;
            continue;
        }
        let at = OnChain {
            network,
            calls: chain,
            now,
        };
        match way.reconcile(&p, &at).await {
            Ok(Some(decided)) => record(store, events, decided, &mut report).await?,
            Ok(None) => report.waiting += 1,
            Err(e) => {
                tracing::warn!(payment = %p.id, error = %e, "reconciliation: chain not read");
                report.waiting += 1;
            }
        }
    }
    Ok(report)
}

/// Records `p`, decided, over a record still open: the request that took the payment (on any
/// node) may have recorded its outcome meanwhile, with more than the chain tells (the
/// transaction).
async fn record(
    store: &dyn Store,
    events: Option<&std::sync::Arc<crate::events::Events>>,
    p: GatewayPayment,
    report: &mut ReconcileReport,
) -> Result<(), StoreError> {
    match p.status {
        PaymentStatus::Settled => report.settled += 1,
        _ => report.failed += 1,
    }
    if store.decide_open_payment(&p).await? {
        tracing::info!(payment = %p.id, status = ?p.status, "payment reconciled from chain state");
        report.decided.push(p.clone());
        if let (PaymentStatus::Settled, Some(events)) = (p.status, events) {
            events.payment_settled(&p);
        }
        // A payment that never landed gives back the plan slot it took in the store.
        if let (PaymentStatus::Failed, Some(slot)) = (p.status, &p.plan_slot) {
            if let Err(e) = store.release_plan_slot(&p.org_id, &slot.month).await {
                tracing::warn!(payment = %p.id, error = %e, "plan slot not given back");
            }
        }
    }
    Ok(())
}
