//! The ledger against the chain (issue 52, `paygate audit`, `GET /api/ledger/audit`): every
//! decided payment of an organisation in a time range is compared with what the chain says moved
//! for it, and each disagreement is listed. What is read, by how the payment moved:
//! - EIP-3009 (`exact`): the token's `authorizationState` of the payer's nonce: spent exactly
//!   when the ledger says `SETTLED`.
//! - Permit2 (`exact`, `upto`): Permit2's nonce bitmap: spent exactly when the ledger says
//!   `SETTLED` for a charge above zero (an `upto` charge of zero sends nothing).
//! - `auth-capture`: the escrow's state of the payment: nothing still held, and what it can
//!   still refund equal to the ledger's capture less its refunds (`FAILED`: nothing captured).
//!
//! Open payments (`RESERVED`, `UNKNOWN`) are reconciliation's and counted apart; channels and
//! access windows keep their own records (their claims are read back by their own loops).

use super::PaymentService;
use alloy_primitives::{Address, U256};
use paygate_domain::model::{GatewayPayment, PaymentStatus, PaymentTransfer};
use paygate_domain::StoreError;
use paygate_store::PaymentQuery;
use paygate_x402::auth_capture;
use paygate_x402::facilitator::embedded::{authorization_state, permit2_nonce_used};

/// How many payments one page of the audit reads from the store.
const PAGE: usize = 500;

/// One payment whose ledger record and chain disagree.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Difference {
    pub payment_id: String,
    /// How it moved: `eip3009`, `permit2`, `upto` or `auth-capture`.
    pub transfer: &'static str,
    /// What the ledger says.
    pub ledger: String,
    /// What the chain says.
    pub chain: String,
}

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

    /// Compares one decided payment with the chain: `None` when they agree, `Err` when the
    /// chain could not be read for it.
    pub async fn audit_one(&self, p: &GatewayPayment) -> Result<Option<Difference>, String> {
        let network = self
            .settleable
            .networks()
            .resolve(&p.network)
            .ok_or("its network is not configured here")?;
        let payer: Address =
            paygate_x402::address::parse_address(&p.payer).ok_or("malformed payer")?;
        let settled = p.status == PaymentStatus::Settled;
        let differs = |transfer, ledger: String, chain: String| {
            Some(Difference {
                payment_id: p.id.clone(),
                transfer,
                ledger,
                chain,
            })
        };
        let rpc = network.config.rpc_url.as_str();
        let spent = |transfer: &'static str, spent: bool, expected: bool| {
            (spent != expected).then(|| Difference {
                payment_id: p.id.clone(),
                transfer,
                ledger: format!("{} {} USDC", p.status.as_str(), p.amount.to_decimal()),
                chain: if spent {
                    "the authorization was spent".into()
                } else {
                    "the authorization is unspent".into()
                },
            })
        };
        match p.transfer {
            PaymentTransfer::Eip3009 | PaymentTransfer::Permit2 | PaymentTransfer::Upto => {
                if rpc.is_empty() {
                    return Err("no RPC URL for its network".into());
                }
                let nonce = p.authorization_nonce().ok_or("malformed nonce key")?;
                let (name, used) = if p.transfer == PaymentTransfer::Eip3009 {
                    let asset =
                        paygate_x402::address::parse_address(&p.asset).ok_or("malformed asset")?;
                    (
                        "eip3009",
                        authorization_state(rpc, asset, payer, nonce).await,
                    )
                } else {
                    let name = if p.transfer == PaymentTransfer::Upto {
                        "upto"
                    } else {
                        "permit2"
                    };
                    (name, permit2_nonce_used(rpc, payer, nonce).await)
                };
                let used = used.map_err(|e| e.to_string())?;
                Ok(spent(name, used, settled && p.amount.0 > 0))
            }
            PaymentTransfer::AuthCapture => {
                let chain = self.chain().ok_or("no relayer calls to read the escrow")?;
                let escrow = p.escrow.as_ref().ok_or("no escrow terms on the record")?;
                let info = escrow.terms.info(payer).ok_or("malformed escrow terms")?;
                let hash = auth_capture::payment_hash(network.config.chain_id, &info);
                let state = auth_capture::read_state(chain.as_ref(), network.config.chain_id, hash)
                    .await
                    .map_err(|e| e.to_string())?;
                // USDC only: a token unit is a USDC base unit.
                let refundable = if settled { escrow.refundable().0 } else { 0 };
                if state.capturable == U256::ZERO && state.refundable == U256::from(refundable) {
                    return Ok(None);
                }
                Ok(differs(
                    "auth-capture",
                    format!(
                        "{}, captured {} USDC, refunded {} USDC",
                        p.status.as_str(),
                        escrow.captured.to_decimal(),
                        escrow.refunded().to_decimal()
                    ),
                    format!(
                        "held {} and refundable {} token units",
                        state.capturable, state.refundable
                    ),
                ))
            }
        }
    }
}
