//! The seller webhooks' dispatcher: every node looks at the store's queue and sends what is due
//! (so a node that dies leaves nothing behind: its lease runs out and another sends). One
//! attempt of a delivery holds its lease (a compare-and-set in the store); deliveries of one
//! object to one endpoint go in order (the queue answers only the oldest pending one); a failed
//! attempt waits `webhooks.retry_seconds` before the next, and once those are used up the
//! delivery is `FAILED` until replayed. Signed as Standard Webhooks signs: `webhook-id` (the
//! event's id, the same on every attempt), `webhook-timestamp` (unix seconds),
//! `webhook-signature` (`v1,` + base64 HMAC-SHA256 of `id.timestamp.body` under each live
//! secret, space-separated during a rotation's overlap).

use crate::state::AppState;
use base64::Engine;
use hmac::{Hmac, Mac};
use paygate_domain::secrets::MasterKey;
use paygate_domain::webhook::{DeliveryAttempt, DeliveryStatus, WebhookDelivery};
use paygate_gateway::events::now_ms;
use std::time::{Duration, Instant};

/// Attempts kept in a delivery's history.
const HISTORY: usize = 20;

/// The `webhook-signature` value of `body` sent as event `id` at `timestamp` under `secrets`
/// (each `whsec_` + base64 of the key).
pub fn sign(secrets: &[String], id: &str, timestamp: i64, body: &str) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    secrets
        .iter()
        .filter_map(|s| b64.decode(s.trim_start_matches("whsec_")).ok())
        .filter_map(|key| Hmac::<sha2::Sha256>::new_from_slice(&key).ok())
        .map(|mut mac| {
            mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
            format!("v1,{}", b64.encode(mac.finalize().into_bytes()))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs the dispatcher until the task is stopped.
pub async fn run(state: AppState) {
    let cfg = &state.config.webhooks;
    let http = match reqwest::Client::builder()
        .timeout(Duration::from_secs(cfg.timeout_seconds.max(1)))
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "webhook dispatcher: no HTTP client; webhooks are not sent");
            return;
        }
    };
    let mut tick = tokio::time::interval(Duration::from_millis(cfg.poll_interval_ms.max(50)));
    loop {
        tick.tick().await;
        dispatch_once(&state, &http).await;
    }
}

/// One look at the queue: every due delivery attempted (at once), each under its lease.
pub async fn dispatch_once(state: &AppState, http: &reqwest::Client) {
    let due = match state.store.due_deliveries(now_ms(), 32).await {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(error = %e, "webhook queue unreadable");
            return;
        }
    };
    if due.is_empty() {
        return;
    }
    let master = state.master_key("webhooks").ok();
    let attempts = due
        .into_iter()
        .map(|d| attempt(state, http, master.as_ref(), d));
    futures_util::future::join_all(attempts).await;
}

async fn attempt(
    state: &AppState,
    http: &reqwest::Client,
    master: Option<&MasterKey>,
    mut d: WebhookDelivery,
) {
    let cfg = &state.config.webhooks;
    let now = now_ms();
    let lease = now + i64::try_from(cfg.timeout_seconds + 5).unwrap_or(60) * 1000;
    match state
        .store
        .lease_delivery(&d.id, d.lease_until_ms, lease)
        .await
    {
        Ok(true) => {}
        // Another node holds it, or the store is away: the next look decides.
        _ => return,
    }
    let endpoint = match state
        .store
        .webhook_endpoint(&d.org_id, &d.endpoint_id)
        .await
    {
        Ok(endpoint) => endpoint,
        Err(e) => {
            tracing::warn!(error = %e, "webhook endpoint unreadable");
            return;
        }
    };
    let t0 = Instant::now();
    let (status, error) = match (&endpoint, master) {
        (None, _) => (None, Some("the endpoint was deleted".to_string())),
        (Some(_), None) => (
            None,
            Some("no master key: the signing secret cannot be opened".to_string()),
        ),
        (Some(e), Some(master)) => {
            let secrets: Vec<String> = e
                .live_secrets(now)
                .filter_map(|s| master.open(&s.sealed, &e.id).ok())
                .filter_map(|b| String::from_utf8(b).ok())
                .collect();
            send(state, http, &e.url, &d, &secrets).await
        }
    };
    let delivered = status.is_some_and(|s| (200..300).contains(&s)) && error.is_none();
    d.attempts += 1;
    d.history.push(DeliveryAttempt {
        at: paygate_domain::now_rfc3339(),
        status,
        error: error.clone(),
        duration_ms: t0.elapsed().as_millis() as u64,
    });
    if d.history.len() > HISTORY {
        d.history.remove(0);
    }
    let wait = cfg.retry_seconds.get(d.attempts as usize - 1);
    d.status = match (delivered, endpoint.is_some(), wait) {
        (true, _, _) => DeliveryStatus::Delivered,
        (false, true, Some(w)) => {
            d.next_attempt_ms = now_ms() + i64::try_from(*w).unwrap_or(i64::MAX / 2000) * 1000;
            DeliveryStatus::Pending
        }
        _ => {
            tracing::warn!(delivery = %d.id, endpoint = %d.endpoint_id, event = %d.event_type, error = ?error, status, "webhook delivery failed for good; replay it once the endpoint is fixed");
            DeliveryStatus::Failed
        }
    };
    d.lease_until_ms = 0;
    d.updated_at = paygate_domain::now_rfc3339();
    if let Err(e) = state.store.update_delivery(&d).await {
        // Sent again by the next look once the lease runs out: at least once.
        tracing::warn!(delivery = %d.id, error = %e, "webhook delivery outcome not recorded");
    }
}

/// One POST: the endpoint's status, or why there was none (and why a status is a failure).
async fn send(
    state: &AppState,
    http: &reqwest::Client,
    url: &str,
    d: &WebhookDelivery,
    secrets: &[String],
) -> (Option<u16>, Option<String>) {
    // The same rule as upstreams: no private addresses unless the operator allows them.
    let allowed = match url::Url::parse(url) {
        Ok(u) => match (u.host_str(), u.port_or_known_default()) {
            (Some(h), Some(p)) => state
                .target_policy
                .check_host(h, p)
                .await
                .map_err(|e| e.to_string()),
            _ => Err("the URL has no host".into()),
        },
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = allowed {
        return (None, Some(format!("refused: {e}")));
    }
    let ts = now_ms() / 1000;
    let sent = http
        .post(url)
        .header("content-type", "application/json")
        .header("user-agent", "paygate-webhooks")
        .header("webhook-id", &d.event_id)
        .header("webhook-timestamp", ts.to_string())
        .header(
            "webhook-signature",
            sign(secrets, &d.event_id, ts, &d.payload),
        )
        .body(d.payload.clone())
        .send()
        .await;
    match sent {
        Ok(r) if r.status().is_success() => (Some(r.status().as_u16()), None),
        Ok(r) => (
            Some(r.status().as_u16()),
            Some(format!("answered {}", r.status())),
        ),
        Err(e) if e.is_timeout() => (None, Some("timed out".into())),
        Err(e) => (None, Some(format!("could not be reached: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::sign;

    #[test]
    fn signatures_are_standard_webhooks_and_one_per_live_secret() {
        // Standard Webhooks' published example (its libraries' test vector).
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_string();
        let id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
        let body = r#"{"test": 2432232314}"#;
        assert_eq!(
            sign(std::slice::from_ref(&secret), id, 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        let two = sign(&[secret.clone(), secret], id, 1614265330, body);
        assert_eq!(two.split(' ').count(), 2);
    }
}
