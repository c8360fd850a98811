//! The sandbox's webhook outbox: due events delivered one at a time, in due order, signed as
//! configured (SPEC's HMAC or CPN's ECDSA), retried with doubling backoff until a `2xx`.

use crate::provider::*;
use crate::{circle, onchain};

/// Delivers due webhooks forever: one at a time, in due order, retrying with backoff.
pub(super) async fn dispatch(s: Shared) {
    loop {
        let next = s.outbox.iter().next();
        let Some(Ok((key, value))) = next else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let due = key
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_be_bytes)
            .unwrap_or(0);
        let now = now_ms();
        if due > now {
            tokio::time::sleep(Duration::from_millis((due - now).min(50))).await;
            continue;
        }
        let Ok(mut o) = serde_json::from_slice::<Outgoing>(&value) else {
            let _ = s.outbox.remove(&key);
            continue;
        };
        let delivered = deliver(&s, &o).await;
        let reschedule = if delivered {
            None
        } else {
            o.attempts += 1;
            let backoff = s
                .cfg
                .webhook_retry_initial_ms
                .saturating_mul(1u64 << o.attempts.min(16).saturating_sub(1))
                .min(s.cfg.webhook_retry_max_ms);
            Some(backoff)
        };
        // One batch: a crash between taking the event out and putting it back must not lose it.
        let moved = (|| -> anyhow::Result<()> {
            let mut batch = sled::Batch::default();
            batch.remove(key.clone());
            if let Some(backoff) = reschedule {
                let k = s.outbox_key(now_ms() + backoff)?;
                batch.insert(k, serde_json::to_vec(&o)?);
            }
            s.outbox.apply_batch(batch)?;
            Ok(())
        })();
        if let Err(e) = moved {
            tracing::warn!(error = %e, "sandbox outbox update failed");
        }
        let _ = s.flush().await;
    }
}

/// Posts one event; `true` once paygate acknowledged it with a `2xx`.
async fn deliver(s: &Inner, o: &Outgoing) -> bool {
    let payout = s
        .payouts
        .get(o.reference.as_bytes())
        .ok()
        .flatten()
        .and_then(|v| serde_json::from_slice::<SbPayout>(&v).ok());
    let Some(mut payout) = payout else {
        return true; // Nothing to tell about.
    };
    if o.silent {
        set_status(s, &payout.reference, &o.status);
        return true;
    }
    let at = paygate_domain::now_rfc3339();
    let post = s
        .http
        .post(&s.webhook_url)
        .header("content-type", "application/json");
    let post = match &s.signer {
        Some((key_id, key)) => {
            if o.event == EventType::PaymentFailed && !onchain::give_back(s, &mut payout).await {
                return false; // The chain did not take it yet: deliver later.
            }
            let body = circle::notification(o, &payout, &at);
            let sig: p256::ecdsa::Signature = p256::ecdsa::signature::Signer::sign(key, &body);
            post.header(cpn::KEY_ID_HEADER, key_id)
                .header(
                    cpn::SIGNATURE_HEADER,
                    base64::engine::general_purpose::STANDARD.encode(sig.to_der().as_bytes()),
                )
                .body(body)
        }
        None => {
            let body = event_body(
                o.event,
                CLIENT_ID,
                &payout.id,
                &o.status,
                payout.dest_amount,
                payout.currency.code(),
                &at,
            );
            let sig = sign_timestamped(&s.secret, &body, paygate_domain::unix_now());
            post.header("Provider-Signature", sig).body(body)
        }
    };
    let sent = post.send().await;
    match sent {
        Ok(r) if r.status().is_success() => {
            set_status(s, &payout.reference, &o.status);
            tracing::info!(payout = %payout.id, event = o.event.as_str(), "sandbox webhook delivered");
            true
        }
        Ok(r) => {
            tracing::warn!(payout = %payout.id, status = r.status().as_u16(), attempt = o.attempts + 1, "sandbox webhook refused; will retry");
            false
        }
        Err(e) => {
            tracing::warn!(payout = %payout.id, error = %e, attempt = o.attempts + 1, "sandbox webhook not delivered; will retry");
            false
        }
    }
}

/// Sets a payout's status on the stored copy as it is now (an RFI answer may have changed it
/// meanwhile).
fn set_status(s: &Inner, reference: &str, status: &str) {
    let _ = s.payouts.update_and_fetch(reference.as_bytes(), |old| {
        let old = old?;
        let Ok(mut p) = serde_json::from_slice::<SbPayout>(old) else {
            return Some(old.to_vec()); // Never dropped for a parse.
        };
        p.status = status.to_string();
        Some(serde_json::to_vec(&p).unwrap_or_else(|_| old.to_vec()))
    });
}
