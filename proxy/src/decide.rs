//! What the gateway does with a request, decided before anything is written: pass it to the
//! control plane, answer it here (challenge, refusal, preflight), or forward it upstream once
//! its payment is taken. [`Gateway::decide`] returns the decision; `request_filter` acts on it.

use crate::gateway::Gateway;
use crate::upstream::ProxyGate;
use paygate_domain::origin_proof::OriginSigner;
use paygate_domain::route_path::lookup_key;
use paygate_domain::ErrorCode;
use paygate_gateway::balancer::Picked;
use paygate_gateway::payments::reply::Answer;
use paygate_gateway::payments::way::{Admission, Admitted, Ended, PaidRequest, Receipt, Refused};
use paygate_gateway::route_table::RouteEntry;
use paygate_gateway::upstream_target::UpstreamTarget;
use pingora::http::RequestHeader;
use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

const GATEWAY_PREFIX: &str = "/gateway/";

/// Where a request stands once `request_filter` has decided.
pub enum Stage {
    /// Not a `/gateway/` path: passed through to the control plane.
    ControlPlane,
    /// Answered by the gateway itself.
    Answered,
    /// Going to the route's upstream (boxed: a paid request's record is large, and only paid
    /// requests carry one).
    Forwarding(Box<Forwarding>),
}

/// A request on its way to a route's upstream, with everything that stage needs.
pub struct Forwarding {
    pub route: Arc<RouteEntry>,
    /// The upstream's address, resolved and checked against the SSRF policy before payment.
    pub addr: SocketAddr,
    /// The target picked among the route's several (`None`: the route's one target).
    pub picked: Option<Picked>,
    /// Targets whose connection failed for this request (not tried again for it); the picked
    /// one among them means another is to be picked by `upstream_peer`.
    pub tried: Vec<usize>,
    /// The payment admitted for it (`None` only for the benchmark build's free pass), until
    /// the payment service has finished with it.
    pub payment: Option<Admitted>,
    /// The receipt the answer carries, once known.
    pub receipt: Option<Receipt>,
    /// The payment's charge was refused at the answer's head: the answer is replaced by this.
    pub refused: Option<Box<Refused>>,
    /// Signs the forwarded request for the origin (`None` without a master key).
    pub origin: Option<Arc<OriginSigner>>,
    /// Non-streaming routes: when the whole upstream response must have arrived.
    pub deadline: Option<Instant>,
    pub body_bytes: u64,
    /// What the answer's end tells the payment: the origin's status, the body kept under a
    /// payment identifier (non-streaming routes, up to [`MAX_KEPT_ANSWER_BYTES`]), its content
    /// type, a charge stated in a trailer.
    pub end: Ended,
    /// The paid request's span (none while traces are off), and its upstream call's.
    pub trace: tracing::Span,
    pub upstream_span: tracing::Span,
}

/// The largest answer kept under a payment identifier; a larger one is not kept (a retry is
/// then answered by the payment's record, as without an identifier).
pub const MAX_KEPT_ANSWER_BYTES: usize = 256 * 1024;

impl Forwarding {
    pub(crate) fn new(
        route: Arc<RouteEntry>,
        admission: Admission,
        origin: Option<Arc<OriginSigner>>,
    ) -> Box<Self> {
        let Admission {
            upstream: (addr, picked),
            payment,
            receipt,
        } = admission;
        let mut f = Self::free(route, (addr, picked), origin);
        f.end.body = (payment.keeps_answer() && !f.route.route.streaming).then(Vec::new);
        (f.payment, f.receipt) = (Some(payment), receipt);
        f
    }

    /// Forwarded with no payment (the benchmark build's free pass).
    pub(crate) fn free(
        route: Arc<RouteEntry>,
        (addr, picked): paygate_gateway::payments::way::Upstream,
        origin: Option<Arc<OriginSigner>>,
    ) -> Box<Self> {
        Box::new(Self {
            route,
            addr,
            picked,
            tried: Vec::new(),
            payment: None,
            receipt: None,
            refused: None,
            origin,
            deadline: None,
            body_bytes: 0,
            end: Ended {
                completed: false,
                upstream_status: None,
                body: None,
                content_type: None,
                stated: None,
            },
            trace: tracing::Span::none(),
            upstream_span: tracing::Span::none(),
        })
    }

    /// Where the request goes: the picked target, or the route's one.
    pub fn target(&self) -> Option<&UpstreamTarget> {
        match (self.picked, &self.route.balancer) {
            (Some(p), Some(b)) => Some(b.target(p)),
            _ => self.route.upstream.as_ref(),
        }
    }

    /// A connection to the picked target failed: another is to be picked.
    pub fn repick(&self) -> bool {
        self.picked.is_some_and(|p| self.tried.contains(&p.index))
    }
}

/// What `request_filter` does.
pub enum Decision {
    PassThrough,
    Answer(Answer),
    Forward(Box<Forwarding>),
}

/// What a decision says of the request for the metrics and CORS: whether it addressed
/// `/gateway/`, and the organisation and route it reached, once known.
#[derive(Default)]
pub struct Labels {
    pub gateway: bool,
    pub org_id: Option<Arc<str>>,
    pub route_id: Option<Arc<str>>,
}

/// A decision and the labels it found.
pub struct Decided {
    pub decision: Decision,
    pub labels: Labels,
}

impl Decided {
    fn plain(decision: Decision) -> Self {
        Self {
            decision,
            labels: Labels::default(),
        }
    }
}

/// What a `/gateway/` lookup found: the route, and of its organisation the id, plan limit
/// and origin signer.
struct Found {
    org_id: Arc<str>,
    entry: Arc<RouteEntry>,
    plan_limit: u64,
    origin: Option<Arc<OriginSigner>>,
}

enum Lookup {
    Route(Found),
    Refuse(Option<Arc<str>>, ErrorCode, &'static str),
}

impl Gateway {
    /// Decides what to do with a request from `client` (the connection's peer), with the
    /// labels (organisation, route) it found for the metrics.
    pub(crate) async fn decide(
        &self,
        req: &RequestHeader,
        client: Option<IpAddr>,
        request_id: &str,
    ) -> Decided {
        if let Some(peer) = client.filter(|_| self.limits.limits_clients()) {
            let forwarded = req
                .headers
                .get("x-forwarded-for")
                .and_then(|v| v.to_str().ok());
            let key = self.limits.client_key(peer, forwarded);
            if let Err(r) = self.limits.check_client(key) {
                return Decided::plain(Decision::Answer(Answer::Stopped(r.stop())));
            }
        }
        if header_bytes(req) > self.settings.max_header_bytes {
            return Decided::plain(error(
                ErrorCode::HeadersTooLarge,
                "request headers are too large",
            ));
        }
        let Some(rest) = req.uri.path().strip_prefix(GATEWAY_PREFIX) else {
            return Decided::plain(Decision::PassThrough);
        };
        let mut labels = Labels {
            gateway: true,
            ..Labels::default()
        };
        if req.method == http::Method::OPTIONS
            && req.headers.contains_key("access-control-request-method")
        {
            return Decided {
                decision: Decision::Answer(Answer::Preflight),
                labels,
            };
        }
        let decision = match self.lookup(rest) {
            Lookup::Refuse(org_id, code, msg) => {
                labels.org_id = org_id;
                error(code, msg)
            }
            Lookup::Route(found) => {
                labels.route_id = Some(found.entry.id.clone());
                labels.org_id = Some(found.org_id.clone());
                match self.paid_step(req, request_id, found).await {
                    Ok(f) => Decision::Forward(f),
                    Err(a) => Decision::Answer(a),
                }
            }
        };
        Decided { decision, labels }
    }

    fn lookup(&self, rest: &str) -> Lookup {
        let (slug, suffix) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let snapshot = self.table.snapshot();
        let Some(org) = snapshot.org(slug) else {
            return Lookup::Refuse(None, ErrorCode::RouteNotFound, "no route at this address");
        };
        let org_id = Some(org.org_id.clone());
        let Some(entry) = org.routes.get(lookup_key(suffix)) else {
            return Lookup::Refuse(org_id, ErrorCode::RouteNotFound, "no route at this address");
        };
        if org.suspended {
            return Lookup::Refuse(
                org_id,
                ErrorCode::OrgSuspended,
                "this organisation is suspended",
            );
        }
        if entry.payment.is_none() {
            return Lookup::Refuse(
                org_id,
                ErrorCode::Misconfigured,
                "this organisation has no receiver wallet configured",
            );
        }
        Lookup::Route(Found {
            org_id: org.org_id.clone(),
            entry: entry.clone(),
            plan_limit: org.plan_limit,
            origin: org.origin.clone(),
        })
    }

    /// The paid step: the payment service admits the request (its challenge, a refusal, an
    /// answer of its own, or the payment taken and the request to forward), the proxy's own
    /// checks answered through [`ProxyGate`].
    async fn paid_step(
        &self,
        req: &RequestHeader,
        request_id: &str,
        found: Found,
    ) -> Result<Box<Forwarding>, Answer> {
        let Found {
            org_id,
            entry,
            plan_limit,
            origin,
        } = found;
        if crate::bench_free_pass() && req.headers.contains_key("x-paygate-bench-free") {
            let to = self.upstream_address(&entry, &req.headers, &[]).await;
            let to = to.map_err(|r| paygate_gateway::payments::reply::stopped(&r))?;
            return Ok(Forwarding::free(entry, to, origin));
        }
        let gate = ProxyGate {
            gateway: self,
            entry: &entry,
            req,
        };
        let paid = PaidRequest {
            org_id: &org_id,
            entry: &entry,
            plan_limit,
            headers: &req.headers,
        };
        let trace = paid.payment().map_or_else(tracing::Span::none, |_| {
            crate::traces::paid_request(req, &org_id, &entry.id)
        });
        let admit = self.payments.admit(&paid, &gate);
        match tracing::Instrument::instrument(admit, trace.clone()).await {
            Ok(admission) => {
                let mut forwarding = Forwarding::new(entry, admission, origin);
                forwarding.trace = trace;
                Ok(forwarding)
            }
            Err(unadmitted) => Err(paygate_gateway::payments::reply::unadmitted(
                unadmitted, &entry, request_id,
            )),
        }
    }
}

fn error(code: ErrorCode, message: &'static str) -> Decision {
    Decision::Answer(Answer::Error(code, Cow::Borrowed(message)))
}

/// Size of the request line and header block, roughly as sent.
fn header_bytes(req: &RequestHeader) -> usize {
    let uri = req.uri.path_and_query().map_or(0, |p| p.as_str().len());
    req.headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum::<usize>()
        + uri
}
