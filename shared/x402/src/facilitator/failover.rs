//! Several facilitators for a network, tried in the configured order (`[[networks.<name>.
//! facilitators]]`), healthy ones first.
//!
//! The rule for trying another one (the settlement's nonce decides):
//! - `verify` changes nothing, so any facilitator that could not be asked (`Unavailable`) is
//!   skipped for the next;
//! - `settle` goes to the next facilitator only when the one asked certainly sent nothing
//!   (`Unavailable`: it could not be reached, or refused before sending). An outcome it does not
//!   know (`Ambiguous`: a timeout after the request left) is not sent elsewhere: that payment's
//!   EIP-3009 authorization may be on its way, and the reconciliation that follows an unknown
//!   outcome reads its nonce on chain. A rejection is an answer, never retried elsewhere.
//!   Even so, the same authorization sent twice could not pay twice: the token takes its nonce
//!   once; the rule keeps the answer true (no "failed" for a payment that landed).
//!
//! Health: a member that could not be reached is marked down at once and tried after the others
//! until a probe (`reach`, run by the health loop) or a call finds it answering again.

pub use super::MemberReport;
use super::{Facilitator, FacilitatorError, PaymentRequest, Reach, Settlement, SupportedKind};
use crate::network::Network;
use alloy_primitives::Address;
use async_trait::async_trait;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

struct Member {
    facilitator: Arc<dyn Facilitator>,
    fee: String,
    healthy: AtomicBool,
    settled: AtomicU64,
}

/// A network's facilitators in order.
pub struct Failover {
    network: String,
    members: Vec<Member>,
}

impl Failover {
    /// `members`: each facilitator with its fee, in the order they are tried.
    pub fn new(network: &str, members: Vec<(Arc<dyn Facilitator>, String)>) -> Self {
        Self {
            network: network.to_string(),
            members: members
                .into_iter()
                .map(|(facilitator, fee)| Member {
                    facilitator,
                    fee,
                    healthy: AtomicBool::new(true),
                    settled: AtomicU64::new(0),
                })
                .collect(),
        }
    }

    /// Healthy members in order, then the others (a last resort): decided once per call, so a
    /// member marked down during it is not asked twice. An `upto` payment goes only to the
    /// embedded facilitator: its Permit2 witness names that relayer, no other can settle it.
    fn order(&self, req: &PaymentRequest<'_>) -> Vec<&Member> {
        let upto = req.payment.scheme() == crate::UPTO_SCHEME;
        let (mut up, down): (Vec<&Member>, Vec<&Member>) = self
            .members
            .iter()
            .filter(|m| !upto || m.facilitator.url().starts_with("embedded"))
            .partition(|m| m.healthy.load(Ordering::Relaxed));
        up.extend(down);
        up
    }

    pub fn reports(&self) -> Vec<MemberReport> {
        self.members
            .iter()
            .map(|m| MemberReport {
                network: self.network.clone(),
                url: m.facilitator.url(),
                fee: m.fee.clone(),
                healthy: m.healthy.load(Ordering::Relaxed),
                settled: m.settled.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// Asks members in order until one answers: `call`'s first answer that is not
    /// `Unavailable` (that member marked up), or the last `Unavailable`.
    async fn first_answer<'m, T, F, Fut>(
        &'m self,
        req: &PaymentRequest<'_>,
        call: F,
    ) -> Result<(T, &'m Member), FacilitatorError>
    where
        F: Fn(&'m Member) -> Fut,
        Fut: std::future::Future<Output = Result<T, FacilitatorError>>,
    {
        let mut last = FacilitatorError::Unavailable("no facilitator configured".into());
        for m in self.order(req) {
            match call(m).await {
                Err(FacilitatorError::Unavailable(why)) => {
                    if m.healthy.swap(false, Ordering::Relaxed) {
                        tracing::warn!(facilitator = %m.facilitator.url(), reason = %why, "facilitator unavailable; trying the next");
                    }
                    last = FacilitatorError::Unavailable(why);
                }
                other => {
                    m.healthy.store(true, Ordering::Relaxed);
                    return other.map(|v| (v, m));
                }
            }
        }
        Err(last)
    }
}

fn union(into: &mut Vec<SupportedKind>, more: Vec<SupportedKind>) {
    for k in more {
        if !into.contains(&k) {
            into.push(k);
        }
    }
}

#[async_trait]
impl Facilitator for Failover {
    async fn verify(&self, req: &PaymentRequest<'_>) -> Result<Address, FacilitatorError> {
        self.first_answer(req, |m| m.facilitator.verify(req))
            .await
            .map(|(payer, _)| payer)
    }

    async fn settle(&self, req: &PaymentRequest<'_>) -> Result<Settlement, FacilitatorError> {
        let (settlement, m) = self
            .first_answer(req, |m| m.facilitator.settle(req))
            .await?;
        m.settled.fetch_add(1, Ordering::Relaxed);
        Ok(settlement)
    }

    async fn supported(&self) -> Result<Vec<SupportedKind>, FacilitatorError> {
        let mut all = Vec::new();
        let mut answered = false;
        for m in &self.members {
            if let Ok(kinds) = m.facilitator.supported().await {
                answered = true;
                union(&mut all, kinds);
            }
        }
        if answered {
            Ok(all)
        } else {
            Err(FacilitatorError::Unavailable(
                "no facilitator of the network answered".into(),
            ))
        }
    }

    fn url(&self) -> String {
        self.members
            .iter()
            .map(|m| m.facilitator.url())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Probes every member (marking each up or down); answering when any is.
    async fn reach(&self) -> Result<Reach, FacilitatorError> {
        let mut reach = Reach {
            supported: Vec::new(),
            answering: Vec::new(),
        };
        let mut any = false;
        for m in &self.members {
            match m.facilitator.reach().await {
                Ok(r) => {
                    any = true;
                    m.healthy.store(!r.answering.is_empty(), Ordering::Relaxed);
                    union(&mut reach.supported, r.supported);
                    union(&mut reach.answering, r.answering);
                }
                Err(_) => m.healthy.store(false, Ordering::Relaxed),
            }
        }
        if any {
            Ok(reach)
        } else {
            Err(FacilitatorError::Unavailable(
                "no facilitator of the network answered".into(),
            ))
        }
    }

    fn members(&self) -> Vec<MemberReport> {
        self.reports()
    }
}

/// Sends each payment to its network's facilitators when the network lists some, else to the
/// deployment's facilitator.
pub struct Routed {
    default: Option<Arc<dyn Facilitator>>,
    by_network: Vec<(Network, Arc<Failover>)>,
}

impl Routed {
    pub fn new(
        default: Option<Arc<dyn Facilitator>>,
        by_network: Vec<(Network, Arc<Failover>)>,
    ) -> Self {
        Self {
            default,
            by_network,
        }
    }

    fn for_network(&self, network: &Network) -> Result<&dyn Facilitator, FacilitatorError> {
        if let Some((_, f)) = self
            .by_network
            .iter()
            .find(|(n, _)| n.caip2 == network.caip2)
        {
            return Ok(f.as_ref());
        }
        self.default.as_deref().ok_or_else(|| {
            FacilitatorError::Unavailable(format!("no facilitator for {}", network.v1_name))
        })
    }

    fn all(&self) -> impl Iterator<Item = &dyn Facilitator> {
        self.by_network
            .iter()
            .map(|(_, f)| f.as_ref() as &dyn Facilitator)
            .chain(self.default.as_deref())
    }
}

#[async_trait]
impl Facilitator for Routed {
    async fn verify(&self, req: &PaymentRequest<'_>) -> Result<Address, FacilitatorError> {
        self.for_network(&req.requirements.network)?
            .verify(req)
            .await
    }

    async fn settle(&self, req: &PaymentRequest<'_>) -> Result<Settlement, FacilitatorError> {
        self.for_network(&req.requirements.network)?
            .settle(req)
            .await
    }

    async fn supported(&self) -> Result<Vec<SupportedKind>, FacilitatorError> {
        let mut all = Vec::new();
        let mut last = None;
        for f in self.all() {
            match f.supported().await {
                Ok(kinds) => union(&mut all, kinds),
                Err(e) => last = Some(e),
            }
        }
        match last {
            Some(e) if all.is_empty() => Err(e),
            _ => Ok(all),
        }
    }

    fn url(&self) -> String {
        self.all().map(|f| f.url()).collect::<Vec<_>>().join(", ")
    }

    async fn reach(&self) -> Result<Reach, FacilitatorError> {
        let mut reach = Reach {
            supported: Vec::new(),
            answering: Vec::new(),
        };
        let mut last = None;
        for f in self.all() {
            match f.reach().await {
                Ok(r) => {
                    union(&mut reach.supported, r.supported);
                    union(&mut reach.answering, r.answering);
                }
                Err(e) => last = Some(e),
            }
        }
        match last {
            Some(e) if reach.supported.is_empty() => Err(e),
            _ => Ok(reach),
        }
    }

    fn members(&self) -> Vec<MemberReport> {
        self.by_network
            .iter()
            .flat_map(|(_, f)| f.reports())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::UsdcAmount;
    use crate::network::{builtin_networks, Networks};
    use crate::payment::{PaymentPayload, SignedAuthorization};
    use crate::verify::Rejection;
    use crate::PaymentRequirements;
    use alloy_primitives::{B256, U256};
    use std::sync::Mutex;

    /// A facilitator answering from a script, counting its calls.
    struct Scripted {
        name: &'static str,
        answers: Mutex<Vec<Result<(), FacilitatorError>>>,
        calls: AtomicU64,
    }

    impl Scripted {
        fn new(name: &'static str, answers: Vec<Result<(), FacilitatorError>>) -> Arc<Self> {
            Arc::new(Self {
                name,
                answers: Mutex::new(answers),
                calls: AtomicU64::new(0),
            })
        }
        fn next(&self) -> Result<(), FacilitatorError> {
            self.calls.fetch_add(1, Ordering::Relaxed);
            let mut a = self.answers.lock().unwrap();
            if a.is_empty() {
                Ok(())
            } else {
                a.remove(0)
            }
        }
    }

    #[async_trait]
    impl Facilitator for Scripted {
        async fn verify(&self, _: &PaymentRequest<'_>) -> Result<Address, FacilitatorError> {
            self.next().map(|()| Address::ZERO)
        }
        async fn settle(&self, _: &PaymentRequest<'_>) -> Result<Settlement, FacilitatorError> {
            self.next().map(|()| Settlement {
                transaction: B256::repeat_byte(1),
                payer: Address::ZERO,
            })
        }
        async fn supported(&self) -> Result<Vec<SupportedKind>, FacilitatorError> {
            self.next().map(|()| {
                vec![SupportedKind {
                    x402_version: 1,
                    scheme: "exact".into(),
                    network: "base-sepolia".into(),
                }]
            })
        }
        fn url(&self) -> String {
            self.name.into()
        }
    }

    fn request() -> (PaymentPayload, SignedAuthorization, PaymentRequirements) {
        let network = Networks::from_config(&builtin_networks())
            .resolve("base-sepolia")
            .unwrap()
            .clone();
        let auth = SignedAuthorization {
            from: Address::ZERO,
            to: Address::ZERO,
            value: U256::from(1),
            valid_after: U256::ZERO,
            valid_before: U256::from(u64::MAX),
            nonce: B256::ZERO,
            signature: Default::default(),
        };
        let payload = crate::payment::empty_v1_payload();
        let req = PaymentRequirements {
            network,
            amount: UsdcAmount(1),
            pay_to: Address::ZERO,
            resource: String::new(),
            description: String::new(),
            mime_type: String::new(),
            max_timeout_seconds: 60,
            token: Default::default(),
        };
        (payload, auth, req)
    }

    fn down() -> Result<(), FacilitatorError> {
        Err(FacilitatorError::Unavailable("connection refused".into()))
    }

    #[tokio::test]
    async fn settle_fails_over_only_when_nothing_was_sent() {
        let (payment, auth, requirements) = request();
        let req = PaymentRequest {
            payment: &payment,
            auth: &auth,
            requirements: &requirements,
        };
        // The first cannot be reached: the second settles; the first is then tried last.
        let a = Scripted::new("a", vec![down()]);
        let b = Scripted::new("b", vec![]);
        let f = Failover::new(
            "base-sepolia",
            vec![(a.clone(), "0.001".into()), (b.clone(), String::new())],
        );
        f.settle(&req).await.unwrap();
        let r = f.reports();
        assert_eq!((r[0].healthy, r[0].settled, r[1].settled), (false, 0, 1));
        f.settle(&req).await.unwrap();
        assert_eq!(
            a.calls.load(Ordering::Relaxed),
            1,
            "a down member waits behind the healthy"
        );
        assert_eq!(f.reports()[1].settled, 2);

        // An unknown outcome is not sent elsewhere (the authorization may be on its way), and
        // a rejection is an answer.
        for answer in [
            FacilitatorError::Ambiguous("timed out".into()),
            FacilitatorError::Rejected(Rejection::InsufficientFunds),
        ] {
            let a = Scripted::new("a", vec![Err(answer.clone())]);
            let b = Scripted::new("b", vec![]);
            let f = Failover::new(
                "base-sepolia",
                vec![(a.clone(), String::new()), (b.clone(), String::new())],
            );
            assert_eq!(f.settle(&req).await.unwrap_err(), answer);
            assert_eq!(b.calls.load(Ordering::Relaxed), 0);
            assert!(f.reports()[0].healthy);
        }

        // None reachable: unavailable; verify the same; a probe that finds one up restores it.
        let a = Scripted::new("a", vec![down(), down(), down()]);
        let b = Scripted::new("b", vec![down(), down()]);
        let f = Failover::new(
            "base-sepolia",
            vec![(a.clone(), String::new()), (b.clone(), String::new())],
        );
        assert!(matches!(
            f.verify(&req).await,
            Err(FacilitatorError::Unavailable(_))
        ));
        assert!(matches!(
            f.settle(&req).await,
            Err(FacilitatorError::Unavailable(_))
        ));
        assert!(f.reports().iter().all(|m| !m.healthy));
        f.reach().await.unwrap();
        let r = f.reports();
        assert!(!r[0].healthy && r[1].healthy, "{r:?}");
        assert_eq!(f.url(), "a, b");
    }
}
