//! Which networks this deployment can settle on, as its facilitator last said: the networks it
//! settles at all (a route may be created on one of them only) and, of those, the ones that
//! answered the last health probe (a route on any other answers `503` before any challenge, so
//! no payer is invited to sign a payment that cannot settle). Kept current by the control
//! plane's probe; read by the proxy on every paid request (one atomic load).

use arc_swap::ArcSwap;
use paygate_x402::facilitator::{Reach, SupportedKind};
use paygate_x402::network::{Network, Networks};
use std::sync::Arc;

/// The networks' standing, by chain id.
#[derive(Debug, Default)]
struct Known {
    /// What the facilitator settles; `None` until it first answered.
    supported: Option<Vec<u64>>,
    /// Of those, what answered the last probe; `None` before the first probe.
    answering: Option<Vec<u64>>,
}

impl Known {
    /// Whether chain `id` can be settled on now: it answered the last probe; before the first
    /// probe, it is one the facilitator settles (or nothing is known yet).
    fn answers(&self, id: u64) -> bool {
        match (&self.answering, &self.supported) {
            (Some(a), _) => a.contains(&id),
            (None, Some(s)) => s.contains(&id),
            (None, None) => true,
        }
    }
}

/// Where a network stands for a new route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// It settles now.
    Settles,
    /// This deployment does not settle it (no facilitator, or not one of its networks).
    NotSettled,
    /// It is one of the facilitator's, but the facilitator or the network's RPC does not answer
    /// now (or has not answered yet since the start).
    NotAnswering,
}

pub struct Settleable {
    networks: Networks,
    known: ArcSwap<Known>,
}

impl Settleable {
    /// Nothing known yet: every configured network passes the proxy until the first probe (a
    /// facilitator that is in fact down then refuses the payment with `503` as before).
    pub fn new(networks: Networks) -> Self {
        Self {
            networks,
            known: ArcSwap::from_pointee(Known::default()),
        }
    }

    /// The configured networks.
    pub fn networks(&self) -> &Networks {
        &self.networks
    }

    /// No facilitator: nothing settles.
    pub fn none(networks: Networks) -> Self {
        let s = Self::new(networks);
        s.known.store(Arc::new(Known {
            supported: Some(Vec::new()),
            answering: Some(Vec::new()),
        }));
        s
    }

    fn chains(&self, kinds: &[SupportedKind]) -> Vec<u64> {
        let mut ids: Vec<u64> = kinds
            .iter()
            .filter(|k| k.scheme == "exact")
            .filter_map(|k| self.networks.resolve(&k.network))
            .map(|n| n.config.chain_id)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// What the facilitator said it settles (at start, before any probe).
    pub fn learn_supported(&self, kinds: &[SupportedKind]) {
        let supported = Some(self.chains(kinds));
        self.known.rcu(|k| Known {
            supported: supported.clone(),
            answering: k.answering.clone(),
        });
    }

    /// A probe's result: what it settles and what answers; `None` (the probe failed): nothing
    /// answers, and what it settles stays as last heard.
    pub fn learn(&self, reach: Option<&Reach>) {
        let (supported, answering) = match reach {
            Some(r) => (Some(self.chains(&r.supported)), self.chains(&r.answering)),
            None => (None, Vec::new()),
        };
        self.known.rcu(|k| Known {
            supported: supported.clone().or_else(|| k.supported.clone()),
            answering: Some(answering.clone()),
        });
    }

    /// Whether a payment on `network` can be settled now (the proxy's check).
    pub fn now(&self, network: &Network) -> bool {
        self.known.load().answers(network.config.chain_id)
    }

    /// Where `network` stands for a route created or moved onto it now.
    pub fn standing(&self, network: &Network) -> Standing {
        let id = network.config.chain_id;
        let k = self.known.load();
        match &k.supported {
            Some(s) if !s.contains(&id) => Standing::NotSettled,
            Some(_) if k.answers(id) => Standing::Settles,
            _ => Standing::NotAnswering,
        }
    }

    /// The networks a route may name now, both spellings (`base-sepolia`, `eip155:84532`).
    pub fn spellings(&self) -> Vec<String> {
        self.settling()
            .flat_map(|n| [n.v1_name.clone(), n.caip2.clone()])
            .collect()
    }

    /// The `exact` kinds that settle now, as `/facilitator/supported` lists them.
    pub fn kinds(&self) -> Vec<SupportedKind> {
        SupportedKind::exact(self.settling())
    }

    /// The networks whose payments settle now.
    pub fn settling(&self) -> impl Iterator<Item = &Network> {
        self.networks
            .all()
            .filter(|n| self.standing(n) == Standing::Settles)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use paygate_x402::network::builtin_networks;

    fn kinds(names: &[&str]) -> Vec<SupportedKind> {
        names
            .iter()
            .map(|n| SupportedKind {
                x402_version: 2,
                scheme: "exact".into(),
                network: (*n).into(),
            })
            .collect()
    }

    fn nets() -> (Networks, Network, Network) {
        let networks = Networks::from_config(&builtin_networks());
        let base = networks.resolve("base").unwrap().clone();
        let sepolia = networks.resolve("base-sepolia").unwrap().clone();
        (networks, base, sepolia)
    }

    #[test]
    fn before_any_answer_the_proxy_lets_every_network_pass_but_no_route_is_created() {
        let (networks, base, _) = nets();
        let s = Settleable::new(networks);
        assert!(s.now(&base));
        assert_eq!(s.standing(&base), Standing::NotAnswering);
        assert!(s.spellings().is_empty());
    }

    #[test]
    fn without_a_facilitator_nothing_settles() {
        let (networks, base, sepolia) = nets();
        let s = Settleable::none(networks);
        assert!(!s.now(&base) && !s.now(&sepolia));
        assert_eq!(s.standing(&sepolia), Standing::NotSettled);
        assert!(s.kinds().is_empty());
    }

    #[test]
    fn a_network_that_stops_answering_refuses_until_it_answers_again() {
        let (networks, base, sepolia) = nets();
        let s = Settleable::new(networks);
        s.learn_supported(&kinds(&["base-sepolia"]));
        assert!(s.now(&sepolia) && !s.now(&base));
        assert_eq!(s.standing(&base), Standing::NotSettled);
        assert_eq!(s.spellings(), ["base-sepolia", "eip155:84532"]);
        // The probe fails: nothing answers, what it settles is remembered.
        s.learn(None);
        assert!(!s.now(&sepolia));
        assert_eq!(s.standing(&sepolia), Standing::NotAnswering);
        assert_eq!(s.standing(&base), Standing::NotSettled);
        // It answers again, by the other spelling.
        let back = Reach {
            supported: kinds(&["eip155:84532"]),
            answering: kinds(&["eip155:84532"]),
        };
        s.learn(Some(&back));
        assert!(s.now(&sepolia));
        assert_eq!(s.standing(&sepolia), Standing::Settles);
        assert_eq!(s.kinds().len(), 2);
        let settling: Vec<_> = s.settling().map(|n| n.caip2.clone()).collect();
        assert_eq!(settling, ["eip155:84532"]);
    }

    #[test]
    fn of_two_networks_the_one_whose_rpc_is_down_is_refused_alone() {
        let (networks, base, sepolia) = nets();
        let s = Settleable::new(networks);
        s.learn(Some(&Reach {
            supported: kinds(&["base", "base-sepolia"]),
            answering: kinds(&["base-sepolia"]),
        }));
        assert!(s.now(&sepolia) && !s.now(&base));
        assert_eq!(s.standing(&base), Standing::NotAnswering);
        // A network paygate has no configuration for is ignored.
        s.learn(Some(&Reach {
            supported: kinds(&["eip155:1", "base-sepolia"]),
            answering: kinds(&["eip155:1", "base-sepolia"]),
        }));
        assert_eq!(s.spellings(), ["base-sepolia", "eip155:84532"]);
    }
}
