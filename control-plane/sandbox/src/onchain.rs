//! The sandbox's side of payouts funded on chain: it checks each payout's funding before it
//! accepts it, and gives a failed payout's USDC back.

use crate::provider::*;

/// With a funding address: the payout's funding must be the transfer of its source amount to
/// that address under the nonce its reference fixes, and on chain; a funding not seen yet is
/// `503` (paygate asks again), a wrong one `400`. `None`: funded, or no funding asked.
pub(super) async fn funding_refusal(
    s: &Inner,
    reference: &str,
    source_amount: &str,
    funding: Option<&paygate_payouts::provider::FundingWire>,
) -> Option<Response> {
    if s.cfg.funding_address.is_empty() {
        return None;
    }
    let Some(f) = funding else {
        return Some(err(StatusCode::BAD_REQUEST, "funding_required"));
    };
    let nonce = paygate_payouts::funding::funding_nonce(reference);
    let right = f.to.eq_ignore_ascii_case(&s.cfg.funding_address)
        && f.amount == source_amount
        && f.nonce.eq_ignore_ascii_case(&nonce.to_string());
    let Ok(from) = f.from.parse::<alloy_primitives::Address>() else {
        return Some(err(StatusCode::BAD_REQUEST, "funding_mismatch"));
    };
    if !right {
        return Some(err(StatusCode::BAD_REQUEST, "funding_mismatch"));
    }
    let Some(chain) = &s.chain else {
        return Some(err(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_chain_to_check_funding",
        ));
    };
    match paygate_payouts::funding::authorization_used(
        chain.calls.as_ref(),
        &chain.network,
        from,
        nonce,
    )
    .await
    {
        Ok(true) => None,
        Ok(false) => Some(err(StatusCode::SERVICE_UNAVAILABLE, "funding_not_seen")),
        Err(e) => Some(err(StatusCode::SERVICE_UNAVAILABLE, &e.to_string())),
    }
}

/// Gives a failed, funded payout's USDC back to the wallet that paid it (once: the return's
/// nonce is the payout's), recording the transaction; `false` if the chain did not take it.
pub(super) async fn give_back(s: &Inner, payout: &mut SbPayout) -> bool {
    let (Some(chain), Some(f)) = (&s.chain, payout.funding.as_mut()) else {
        return true;
    };
    let Some(returner) = &chain.returner else {
        return true;
    };
    if f.returned {
        return true;
    }
    let (Ok(to), Ok(amount)) = (f.from.parse(), parse_amount(&f.amount)) else {
        return true;
    };
    let nonce =
        alloy_primitives::keccak256(format!("paygate-sandbox/return/v1/{}", payout.reference));
    match paygate_payouts::funding::send_authorized(
        chain.calls.as_ref(),
        &chain.network,
        returner,
        to,
        amount,
        nonce,
    )
    .await
    {
        Ok(tx) => {
            // An earlier attempt's transaction is not known here: the nonce says it was sent.
            f.returned = true;
            f.returned_transaction = tx.map(|t| t.to_string());
            if let Ok(b) = serde_json::to_vec(&*payout) {
                let _ = s.payouts.insert(payout.reference.as_bytes(), b);
            }
            tracing::info!(payout = %payout.id, "sandbox gave a failed payout's USDC back");
            true
        }
        Err(e) => {
            tracing::warn!(payout = %payout.id, error = %e, "sandbox could not give the USDC back; will retry");
            false
        }
    }
}
