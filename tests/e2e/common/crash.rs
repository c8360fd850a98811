//! The tally of the paid-request SIGKILL harnesses (one node in `e2e_crash`, a cluster in
//! `e2e_cluster_faults`): how each trial ended, judged by the chain and the store.

use super::chain::PaymentSpec;
use super::{error_of, Gateway};
use paygate_domain::model::{nonce_key, PaymentStatus};
use paygate_x402::network::Network;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Counted over all trials; `served_twice`, `lost`, `stuck` and `unredeemed` must be zero.
#[derive(Default, Debug)]
pub struct Tally {
    pub trials: usize,
    pub served_twice: usize,
    pub lost: usize,
    pub stuck: usize,
    /// Money moved and the request was served once (the normal outcome).
    pub paid_and_served: usize,
    /// Money moved, the request was not served. A payment whose request died before recording
    /// its settlement is found settled by reconciliation and its retry is served (so it is
    /// counted above); what remains here is a kill in the instant between the request recording
    /// `Settled` and the upstream receiving it: the retry is refused as a replay, because
    /// forwarding is at most once.
    pub paid_not_served: usize,
    /// Of `paid_and_served`: served on the retry of a payment reconciliation found settled.
    pub redeemed: usize,
    /// Of `paid_not_served`: payments reconciliation found settled whose retry was still not
    /// served. Must be 0: those requests never reached the upstream, so the retry is owed.
    pub unredeemed: usize,
    /// Nothing moved (killed before the transfer was sent); the retry was refused or served.
    pub not_charged: usize,
    /// How the first attempt ended (status, or "cut" when the kill cut the connection).
    pub first: BTreeMap<String, usize>,
    /// How the retry ended.
    pub retry: BTreeMap<String, usize>,
    seen: Seen,
}

/// Each trial's nonce key, whether money moved, and how often the upstream served it (left
/// out of the printed tally).
#[derive(Default)]
struct Seen(Vec<(String, bool, usize)>);

impl std::fmt::Debug for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} payments", self.0.len())
    }
}

/// The client's retries of one payment to `path` on `gw` (`header`: its name and value) until
/// the answer is not "try again later" (a cut connection, a 5xx, `SETTLEMENT_PENDING`) or
/// `patience` is over: how it ended (`200`, `STATUS CODE`, or `cut`).
pub async fn retry_until_final(
    gw: &Gateway,
    path: &str,
    header: (&str, &str),
    patience: Duration,
) -> String {
    let deadline = Instant::now() + patience;
    loop {
        let answer = match gw
            .http
            .get(gw.url(path))
            .header(header.0, header.1)
            .send()
            .await
        {
            Ok(r) if r.status() == 200 => "200".to_string(),
            Ok(r) => {
                let (status, code, _) = error_of(r).await;
                format!("{status} {code}")
            }
            Err(_) => "cut".into(),
        };
        let pending =
            answer == "cut" || answer.starts_with('5') || answer.ends_with(" SETTLEMENT_PENDING");
        if !pending || Instant::now() > deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

impl Tally {
    /// Judges one trial once the client is done: did money move (the chain says), how often
    /// was it served (the upstream says).
    pub async fn judge(&mut self, rpc: &str, net: &Network, spec: &PaymentSpec, served: usize) {
        let auth = spec.authorization();
        let moved = paygate_x402::facilitator::embedded::authorization_state(
            rpc,
            net.config.asset,
            auth.from,
            auth.nonce,
        )
        .await
        .expect("authorizationState");
        self.trials += 1;
        if served > 1 {
            self.served_twice += 1;
        }
        match (moved, served) {
            (true, 0) => self.paid_not_served += 1,
            (true, _) => self.paid_and_served += 1,
            (false, _) => self.not_charged += 1,
        }
        let key = nonce_key(net.config.chain_id, net.config.asset, &auth);
        self.seen.0.push((key, moved, served));
    }

    /// Reads every trial's record once reconciliation has run: nothing unfinished, money that
    /// moved recorded `SETTLED`, payments found settled redeemed by their retry.
    pub async fn close(&mut self, store: &dyn paygate_store::Store) {
        self.stuck = store.unfinished_payments().await.unwrap().len();
        for (key, moved, served) in &self.seen.0 {
            let record = store.payment_for_nonce(key).await.unwrap();
            if record.as_ref().is_some_and(|r| r.redeemed_at.is_some()) {
                self.redeemed += 1;
            }
            if *moved
                && *served == 0
                && record.as_ref().is_some_and(|r| r.settled_by_reconciliation)
            {
                self.unredeemed += 1;
            }
            if *moved && !matches!(record.map(|r| r.status), Some(PaymentStatus::Settled)) {
                self.lost += 1;
            }
        }
    }

    /// Nothing served twice, lost, stuck or owed.
    pub fn assert_clean(&self) {
        assert_eq!(self.served_twice, 0, "{self:?}");
        assert_eq!(self.lost, 0, "{self:?}");
        assert_eq!(self.stuck, 0, "{self:?}");
        assert_eq!(self.unredeemed, 0, "{self:?}");
    }
}
