//! The in-memory route table the hot path reads: an immutable snapshot swapped atomically
//! (`arc-swap`) whenever the control plane changes an organisation or its routes. Challenges are
//! rendered here, once per change, so serving a `402` copies pre-built bytes.

use crate::balancer::Balancer;
use crate::payments::registry;
use crate::payments::way::Terms;
pub use crate::route_entry::RouteEntry;
use crate::target_policy::TargetPolicy;
use crate::upstream_target::UpstreamTarget;
use alloy_primitives::Address;
use arc_swap::{ArcSwap, Guard};
use paygate_config::Config;
use paygate_domain::model::{Org, Route};
use paygate_domain::origin_proof::{OriginProofKey, OriginSigner};
use paygate_domain::StoreResult;
use paygate_store::Store;
use paygate_x402::money::UsdcAmount;
use paygate_x402::network::Networks;
use paygate_x402::{Challenge, Extensions, PaymentRequirements, NO_PAYMENT_ERROR};
use std::collections::HashMap;

/// The maps the proxy looks up on every request: organisation by slug, route by path.
pub type ByKey<V> = crate::FastMap<String, V>;
use std::sync::{Arc, Weak};

/// Slug and path of the public sandbox route; no organisation can take the slug.
pub const SANDBOX_SLUG: &str = "demo";
pub const SANDBOX_PATH: &str = "/demo";

/// An organisation and its active routes, keyed by stored path.
#[derive(Debug)]
pub struct OrgRoutes {
    pub org_id: Arc<str>,
    pub slug: String,
    pub suspended: bool,
    /// Paid requests allowed per calendar month (UTC) by the org's plan; 0 = unlimited.
    pub plan_limit: u64,
    pub receiver_wallet: Option<Address>,
    /// Signs the requests forwarded for this organisation (`X-Paygate-Signature`).
    pub origin: Option<Arc<OriginSigner>>,
    pub routes: ByKey<Arc<RouteEntry>>,
    /// A digest of the stored records this was built from (the organisation and all its
    /// routes); `None` after a one-route refresh. A resync republishes only what differs.
    source: Option<u64>,
}

/// An immutable view of every organisation's active routes.
#[derive(Debug, Default)]
pub struct Snapshot {
    by_slug: ByKey<Arc<OrgRoutes>>,
}

impl Snapshot {
    pub fn org(&self, slug: &str) -> Option<&OrgRoutes> {
        self.by_slug.get(slug).map(|o| o.as_ref())
    }

    pub fn orgs(&self) -> impl Iterator<Item = &OrgRoutes> {
        self.by_slug.values().map(|o| o.as_ref())
    }
}

/// Route id -> (fingerprint of its targets and checks, its balancer while some entry holds it).
type KeptBalancers = HashMap<String, (u64, Weak<Balancer>)>;

/// What challenges are built from: networks, the public base URL and timeouts.
#[derive(Debug, Clone)]
pub struct RenderContext {
    pub networks: Networks,
    pub public_base_url: String,
    pub max_timeout_seconds: u64,
    pub sandbox_pay_to: Address,
    pub sandbox_price: UsdcAmount,
    /// Monthly paid-request limit per plan name.
    pub plan_limits: HashMap<String, u64>,
    /// The limit of the default plan (for orgs whose plan is no longer configured).
    pub default_plan_limit: u64,
    /// Derives each organisation's origin secret; `None` without a master key (forwarded
    /// requests then carry no proof, and the start log says so).
    pub origin_key: Option<OriginProofKey>,
    /// The SSRF policy health checks resolve targets under.
    pub policy: Arc<TargetPolicy>,
    pub insecure_tls_hosts: Vec<String>,
    /// What this deployment offers beside `exact`, each way's own terms (a scheme without its
    /// terms is not offered).
    pub terms: Terms,
    /// The balancers of routes with several targets or health checks, kept across rebuilds of
    /// their entries while their targets stay the same (so is their targets' health).
    balancers: Arc<std::sync::Mutex<KeptBalancers>>,
}

impl RenderContext {
    pub fn from_config(cfg: &Config) -> Self {
        Self {
            networks: Networks::from_config(&cfg.networks),
            public_base_url: cfg.server.public_base_url(),
            max_timeout_seconds: cfg.x402.max_timeout_seconds,
            sandbox_pay_to: cfg.x402.demo_pay_to,
            // Validated when the configuration was loaded.
            sandbox_price: UsdcAmount::from_usd_str(&cfg.x402.demo_price_usd)
                .unwrap_or(UsdcAmount(10_000)),
            plan_limits: cfg
                .plans
                .iter()
                .map(|(n, p)| (n.clone(), p.monthly_requests))
                .collect(),
            default_plan_limit: cfg
                .plans
                .get(&cfg.orgs.default_plan)
                .map_or(0, |p| p.monthly_requests),
            origin_key: OriginProofKey::from_env(&cfg.orgs.master_key_env),
            policy: Arc::new(TargetPolicy::new(
                cfg.upstream.allow_private_networks.clone(),
            )),
            insecure_tls_hosts: cfg.upstream.insecure_tls_hosts.clone(),
            terms: registry::terms(cfg),
            balancers: Default::default(),
        }
    }

    /// The balancer of a route that has several targets or health checks (`None` for one
    /// target without checks: it is forwarded to directly).
    fn balancer(&self, route: &Route) -> Option<Arc<Balancer>> {
        let targets = route.targets();
        if targets.len() < 2 && route.health_check.is_none() {
            return None;
        }
        let fingerprint = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            serde_json::to_string(&(&targets, &route.balancing, &route.health_check))
                .unwrap_or_default()
                .hash(&mut h);
            h.finish()
        };
        let mut kept = self.balancers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = kept
            .get(&route.id)
            .filter(|(f, _)| *f == fingerprint)
            .and_then(|(_, w)| w.upgrade())
        {
            return Some(b);
        }
        kept.retain(|_, (_, w)| w.strong_count() > 0);
        let b = Balancer::start(
            &targets,
            &route.balancing,
            route.health_check.as_ref(),
            self.policy.clone(),
            &self.insecure_tls_hosts,
        )?;
        kept.insert(route.id.clone(), (fingerprint, Arc::downgrade(&b)));
        Some(b)
    }

    /// Absolute URL of a route: `{public_base_url}/gateway/{slug}{path}`.
    pub fn resource_url(&self, slug: &str, path: &str) -> String {
        format!("{}/gateway/{slug}{path}", self.public_base_url)
    }

    /// The requirements a route asks for, or `None` if it cannot be paid (no receiver wallet,
    /// network no longer configured).
    pub fn requirements(
        &self,
        slug: &str,
        route: &Route,
        pay_to: Option<Address>,
    ) -> Option<PaymentRequirements> {
        let (network, token) = self
            .networks
            .resolve(&route.network)?
            .with_token(&route.token)?;
        Some(PaymentRequirements {
            network,
            amount: route.price,
            pay_to: pay_to?,
            resource: self.resource_url(slug, &route.path),
            description: route.description.clone(),
            mime_type: route.mime_type.clone().unwrap_or_default(),
            max_timeout_seconds: self.max_timeout_seconds,
            token,
        })
    }

    fn entry(
        &self,
        slug: &str,
        route: Route,
        pay_to: Option<Address>,
        sandbox: bool,
    ) -> RouteEntry {
        let payment = self.requirements(slug, &route, pay_to).map(|req| {
            let mut extensions = Extensions {
                bazaar: Some(crate::bazaar::http(&route)),
                ..Extensions::default()
            };
            registry::declare(&route, sandbox, &mut extensions);
            let challenge = Challenge::render_offered(
                &req,
                NO_PAYMENT_ERROR,
                Arc::new(extensions),
                registry::offer(&route, &self.terms),
            );
            (req, challenge)
        });
        let (upstream, balancer) = if sandbox {
            (None, None)
        } else {
            (
                UpstreamTarget::parse(&route.target_url),
                self.balancer(&route),
            )
        };
        RouteEntry {
            id: Arc::from(route.id.as_str()),
            route,
            upstream,
            balancer,
            payment,
            sandbox,
            rendered: Default::default(),
        }
    }

    /// An organisation's route as the table keys it: `(path, entry)`.
    fn route_entry(&self, org: &Org, route: Route) -> (String, Arc<RouteEntry>) {
        let path = route.path.clone();
        let entry = self.entry(&org.slug, route, org.receiver_wallet, false);
        (path, Arc::new(entry))
    }

    fn org_routes(&self, org: &Org, routes: Vec<Route>) -> OrgRoutes {
        let source = Some(digest(org, &routes));
        let routes = routes
            .into_iter()
            .filter(|r| r.active)
            .map(|r| self.route_entry(org, r))
            .collect();
        OrgRoutes {
            org_id: Arc::from(org.id.as_str()),
            slug: org.slug.clone(),
            suspended: org.suspended,
            plan_limit: self
                .plan_limits
                .get(&org.plan)
                .copied()
                .unwrap_or(self.default_plan_limit),
            receiver_wallet: org.receiver_wallet,
            origin: self.origin_key.as_ref().map(|k| {
                Arc::new(k.signer(
                    &org.id,
                    org.origin_secret_generation,
                    org.origin_secret_rotated_at,
                    paygate_domain::unix_now(),
                ))
            }),
            routes,
            source,
        }
    }

    fn sandbox(&self) -> OrgRoutes {
        let now = paygate_domain::now_rfc3339();
        let route = Route {
            id: "rt_sandbox".into(),
            org_id: "org_sandbox".into(),
            path: SANDBOX_PATH.into(),
            price: self.sandbox_price,
            target_url: String::new(),
            network: "base-sepolia".into(),
            active: true,
            streaming: false,
            discoverable: false,
            origin_deduplicates: false,
            targets: Vec::new(),
            balancing: Default::default(),
            health_check: None,
            description: "paygate public sandbox: answers a valid Base Sepolia test payment \
                          with a fixed body and a sandbox receipt; never proxied, never settled"
                .into(),
            bazaar_category: None,
            mime_type: Some("application/json".into()),
            input_schema: None,
            output_schema: Some(serde_json::json!({
                "type": "object",
                "properties": {
                    "sandbox": {"const": true},
                    "message": {"type": "string"},
                    "payer": {"type": "string", "description": "The payer's address"},
                    "network": {"type": "string"},
                    "amount": {"type": "string", "description": "USDC base units"}
                },
                "required": ["sandbox", "message", "payer", "network", "amount"]
            })),
            public_tool: false,
            schemes: paygate_domain::model::exact_only(),
            protocols: paygate_domain::model::both_protocols(),
            pricing: paygate_domain::model::Pricing::Fixed,
            access_window_seconds: None,
            access_window_calls: None,
            refund_window_seconds: None,
            token: paygate_domain::model::usdc(),
            created_at_ns: 0,
            created_at: now.clone(),
            updated_at: now,
        };
        let entry = self.entry(SANDBOX_SLUG, route, Some(self.sandbox_pay_to), true);
        OrgRoutes {
            org_id: "org_sandbox".into(),
            slug: SANDBOX_SLUG.into(),
            suspended: false,
            plan_limit: 0,
            receiver_wallet: Some(self.sandbox_pay_to),
            origin: None,
            routes: [(SANDBOX_PATH.to_string(), Arc::new(entry))]
                .into_iter()
                .collect(),
            source: None,
        }
    }
}

/// The shared table: readers load a snapshot without locking; writers serialise among themselves.
pub struct RouteTable {
    current: ArcSwap<Snapshot>,
    writer: tokio::sync::Mutex<()>,
    ctx: RenderContext,
    /// The id of each organisation whose snapshot entry was replaced, for listeners such as MCP
    /// sessions (which push `tools/list_changed`).
    changes: tokio::sync::broadcast::Sender<Arc<str>>,
}

impl RouteTable {
    /// Builds the table from everything in the store.
    pub async fn load(ctx: RenderContext, store: &dyn Store) -> StoreResult<Self> {
        let mut by_slug = ByKey::default();
        for org in store.list_orgs().await? {
            let routes = store.list_routes(&org.id).await?;
            by_slug.insert(org.slug.clone(), Arc::new(ctx.org_routes(&org, routes)));
        }
        by_slug.insert(SANDBOX_SLUG.to_string(), Arc::new(ctx.sandbox()));
        Ok(Self {
            current: ArcSwap::from_pointee(Snapshot { by_slug }),
            writer: tokio::sync::Mutex::new(()),
            ctx,
            changes: tokio::sync::broadcast::channel(256).0,
        })
    }

    /// The current snapshot (lock-free).
    pub fn snapshot(&self) -> Guard<Arc<Snapshot>> {
        self.current.load()
    }

    pub fn render_context(&self) -> &RenderContext {
        &self.ctx
    }

    /// Announces every later change: the id of the organisation whose routes were republished.
    /// A receiver that falls behind gets `Lagged` and should treat every org as changed.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Arc<str>> {
        self.changes.subscribe()
    }

    /// Re-reads one organisation and its routes from the store and publishes a new snapshot.
    /// Called after every committed change, before the API answers, so the proxy already
    /// serves the change when the client hears of it.
    pub async fn refresh_org(&self, store: &dyn Store, org_id: &str) -> StoreResult<()> {
        let _guard = self.writer.lock().await;
        self.reload_org(store, org_id).await
    }

    /// Re-reads one route of an organisation (created, changed or deleted) and publishes a new
    /// snapshot. Only that route's entry is rebuilt (its challenge re-rendered); the others are
    /// shared with the previous snapshot by reference, so a change re-renders one challenge
    /// whether the organisation has 10 routes or 10,000.
    pub async fn refresh_route(
        &self,
        store: &dyn Store,
        org_id: &str,
        route_id: &str,
    ) -> StoreResult<()> {
        let _guard = self.writer.lock().await;
        let old = self.current.load_full();
        let (Some(org), Some(existing)) = (
            store.get_org(org_id).await?,
            old.by_slug.values().find(|o| &*o.org_id == org_id),
        ) else {
            return self.reload_org(store, org_id).await;
        };
        let route = store.get_route(org_id, route_id).await?;
        let mut fresh = self.ctx.org_routes(&org, Vec::new());
        fresh.source = None;
        fresh.routes = existing.routes.clone();
        fresh.routes.retain(|_, e| &*e.id != route_id);
        if let Some(r) = route.filter(|r| r.active) {
            let (path, entry) = self.ctx.route_entry(&org, r);
            fresh.routes.insert(path, entry);
        }
        self.publish(&old, org_id, Some((org.slug, Arc::new(fresh))));
        Ok(())
    }

    /// Re-reads one organisation and republishes it if its records changed since the table
    /// last read them (another node's change); `true` when it did.
    pub async fn resync_org(&self, store: &dyn Store, org_id: &str) -> StoreResult<bool> {
        let _guard = self.writer.lock().await;
        let org = store.get_org(org_id).await?;
        let current = self.current.load_full();
        let held = current.by_slug.values().find(|o| &*o.org_id == org_id);
        let fresh = match org {
            Some(org) => {
                let routes = store.list_routes(&org.id).await?;
                if held.and_then(|h| h.source) == Some(digest(&org, &routes)) {
                    return Ok(false);
                }
                Some((
                    org.slug.clone(),
                    Arc::new(self.ctx.org_routes(&org, routes)),
                ))
            }
            None if held.is_none() => return Ok(false),
            None => None,
        };
        self.publish(&current, org_id, fresh);
        Ok(true)
    }

    /// Resyncs every organisation in the store (a cluster node's periodic pass, which heals a
    /// change whose notification was lost); the number republished.
    pub async fn resync(&self, store: &dyn Store) -> StoreResult<usize> {
        let mut republished = 0;
        for org in store.list_orgs().await? {
            if self.resync_org(store, &org.id).await? {
                republished += 1;
            }
        }
        Ok(republished)
    }

    async fn reload_org(&self, store: &dyn Store, org_id: &str) -> StoreResult<()> {
        let org = store.get_org(org_id).await?;
        let fresh = match org {
            Some(org) => {
                let routes = store.list_routes(&org.id).await?;
                Some((
                    org.slug.clone(),
                    Arc::new(self.ctx.org_routes(&org, routes)),
                ))
            }
            None => None,
        };
        self.publish(&self.current.load_full(), org_id, fresh);
        Ok(())
    }

    /// Publishes `old` with `org_id`'s entry replaced by `fresh` (removed if `None`) and tells
    /// the subscribers. Callers hold the writer lock.
    fn publish(&self, old: &Snapshot, org_id: &str, fresh: Option<(String, Arc<OrgRoutes>)>) {
        let mut by_slug = old.by_slug.clone();
        by_slug.retain(|_, o| &*o.org_id != org_id);
        if let Some((slug, routes)) = fresh {
            by_slug.insert(slug, routes);
        }
        self.current.store(Arc::new(Snapshot { by_slug }));
        // No receiver is fine: nobody is listening.
        let _ = self.changes.send(Arc::from(org_id));
    }
}

/// The digest of an organisation's stored records, as `OrgRoutes::source`.
fn digest(org: &Org, routes: &[Route]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut ids: Vec<&Route> = routes.iter().collect();
    ids.sort_by(|a, b| a.id.cmp(&b.id));
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(org).unwrap_or_default().hash(&mut h);
    serde_json::to_string(&ids).unwrap_or_default().hash(&mut h);
    h.finish()
}
