//! The ledger against the chain (issue 52, `paygate audit`, `GET /api/ledger/audit`): every
//! decided payment of an organisation in a time range is compared with what the chain says moved
//! for it, by the way of paying that took it ([`Way::audit`](super::way::Way): EIP-3009's
//! authorization state or Permit2's nonce for `exact` and `upto`, the escrow's state for
//! `auth-capture`), and each disagreement is listed.
//!
//! Open payments (`RESERVED`, `UNKNOWN`) are reconciliation's and counted apart; channels and
//! access windows keep their own records (their claims are read back by their own loops).

pub use super::way::Difference;
use super::way::OnChain;
use super::PaymentService;
use paygate_domain::model::GatewayPayment;
use paygate_domain::StoreError;
use paygate_store::PaymentQuery;

/// How many payments one page of the audit reads from the store.
const PAGE: usize = 500;

/// What an audit found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Audit {
    /// Decided payments compared with the chain.
    pub checked: usize,
    /// Payments still open (reconciliation decides them).
    pub open: usize,
    /// Decided payments that could not be read back (no RPC for their network, or no relayer
    /// calls for the escrow), each listed in `unreadable`.
    pub unreadable: Vec<String>,
    pub differences: Vec<Difference>,
}

impl PaymentService {
    /// Audits `org_id`'s payments with ids in `[from_id, before_id)` (a time range as ids).
    pub async fn audit(
        &self,
        org_id: &str,
        from_id: Option<String>,
        before_id: Option<String>,
    ) -> Result<Audit, StoreError> {
        let mut audit = Audit::default();
        let mut cursor = before_id;
        loop {
            let q = PaymentQuery {
                from_id: from_id.clone(),
                before_id: cursor.clone(),
                limit: PAGE,
                ..Default::default()
            };
            let page = self.store.list_payments(org_id, &q).await?;
            for p in &page {
                if p.status.is_open() {
                    audit.open += 1;
                    continue;
                }
                match self.audit_one(p).await {
                    Ok(None) => audit.checked += 1,
                    Ok(Some(d)) => {
                        audit.checked += 1;
                        audit.differences.push(d);
                    }
                    Err(why) => audit.unreadable.push(format!("{}: {why}", p.id)),
                }
            }
            if page.len() < PAGE {
                return Ok(audit);
            }
            cursor = page.last().map(|p| p.id.clone());
        }
    }

    /// Compares one decided payment with the chain, through the way of paying that took it:
    /// `None` when they agree, `Err` when the chain could not be read for it.
    pub async fn audit_one(&self, p: &GatewayPayment) -> Result<Option<Difference>, String> {
        let network = self
            .settleable
            .networks()
            .resolve(&p.network)
            .ok_or("its network is not configured here")?;
        let way = super::registry::reconciler(p).ok_or("no way of paying took this record")?;
        let at = OnChain {
            network,
            calls: self.chain().map(|c| c.as_ref()),
            now: paygate_domain::unix_now(),
        };
        way.audit(p, &at).await
    }
}
