//! Reconciliation of payments whose settlement outcome is not recorded: `Unknown` (the transfer
//! was sent, the receipt never came) and `Reserved` left behind by a crash. The chain decides:
//! `authorizationState(from, nonce)` on the token (Permit2's `nonceBitmap` bit for a Permit2 or
//! `upto` payment) true means the money moved (`Settled`); false after the
//! authorization's `validBefore` means it never can (`Failed`, the nonce stays reserved); false
//! before it means a transaction may still land, so the payment waits for the next pass. A
//! payment closed `Failed` gives back the plan slot its record names (taken in the store on a
//! cluster, with the reservation).

use super::ways::auth_capture;
use paygate_domain::model::{GatewayPayment, PaymentStatus, PaymentTransfer};
use paygate_domain::StoreError;
use paygate_store::Store;
use paygate_x402::facilitator::ChainCalls;
use paygate_x402::network::Networks;
use time::OffsetDateTime;

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReconcileReport {
    pub settled: usize,
    pub failed: usize,
    pub waiting: usize,
}

fn created(p: &GatewayPayment) -> OffsetDateTime {
    OffsetDateTime::parse(
        &p.created_at,
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// One pass over unfinished payments. Payments created less than `in_flight_secs` ago by this
/// process (after `started`) may still be settling on the hot path and are left alone. The
/// comparison keeps the records' sub-second precision: a process restarted within the second
/// it crashed in must still treat the crashed process's reservations as left behind.
///
/// An `auth-capture` payment is decided by the escrow through `chain` (the relayer's calls: it
/// voids what a crash left held); its live request may hold it for up to
/// [`HELD_IN_FLIGHT_SECS`] (an origin's long answer) before reconciliation takes it as left.
pub async fn reconcile_once(
    store: &dyn Store,
    events: Option<&std::sync::Arc<crate::events::Events>>,
    networks: &Networks,
    chain: Option<&dyn ChainCalls>,
    started: OffsetDateTime,
    in_flight_secs: i64,
) -> Result<ReconcileReport, StoreError> {
    let now_t = OffsetDateTime::now_utc();
    let now = now_t.unix_timestamp();
    let mut report = ReconcileReport::default();
    for mut p in store.unfinished_payments().await? {
        let created = created(&p);
        let escrowed = p.transfer == PaymentTransfer::AuthCapture;
        let in_flight = if escrowed {
            in_flight_secs.max(HELD_IN_FLIGHT_SECS)
        } else {
            in_flight_secs
        };
        if created >= started && (now_t - created).whole_seconds() < in_flight {
            report.waiting += 1;
            continue;
        }
        if escrowed {
            let decided = match (networks.resolve(&p.network), chain) {
                (Some(n), Some(chain)) => {
                    let chain_id = n.config.chain_id;
                    auth_capture::reconcile(&p, chain, chain_id, now.max(0) as u64).await
                }
                _ => Err("no relayer calls for the escrow's network".to_string()),
            };
            match decided {
                Ok(Some(d)) => record(store, events, d, &mut report).await?,
                Ok(None) => report.waiting += 1,
                Err(e) => {
                    tracing::warn!(payment = %p.id, error = %e, "reconciliation: escrow not read");
                    report.waiting += 1;
                }
            }
            continue;
        }
        let (Some(network), Some(from), Some(nonce)) = (
            networks.resolve(&p.network),
            paygate_x402::address::parse_address(&p.payer),
            p.authorization_nonce(),
        ) else {
            tracing::warn!(payment = %p.id, "cannot reconcile: unknown network or malformed record");
            report.waiting += 1;
            continue;
        };
        if network.config.rpc_url.is_empty() {
            report.waiting += 1;
            continue;
        }
        // The way of paying that left it to reconciliation asks the chain.
        let asked = super::registry::used_on_chain(&p, &network.config.rpc_url, from, nonce);
        let used = match asked.await {
            Some(Ok(used)) => used,
            None => {
                tracing::warn!(payment = %p.id, "cannot reconcile: no way of paying reconciles it");
                report.waiting += 1;
                continue;
            }
            Some(Err(e)) => {
                tracing::warn!(payment = %p.id, error = %e, "reconciliation: chain unreachable");
                report.waiting += 1;
                continue;
            }
        };
        p.updated_at = paygate_domain::now_rfc3339();
        if used {
            p.status = PaymentStatus::Settled;
            p.settled_by_reconciliation = true;
            p.failure = None;
        } else if (now.max(0) as u64) > p.valid_before {
            p.status = PaymentStatus::Failed;
            p.failure = Some("authorization expired without settling".into());
        } else {
            report.waiting += 1;
            continue;
        }
        record(store, events, p, &mut report).await?;
    }
    Ok(report)
}

/// How long a live request may hold an `auth-capture` payment before reconciliation takes the
/// hold as left behind (this process's own records; a crash's are taken at once).
pub const HELD_IN_FLIGHT_SECS: i64 = 300;

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
