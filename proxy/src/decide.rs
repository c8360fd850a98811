//! What the gateway does with a request, decided before anything is written: pass it to the
//! control plane, answer it here (challenge, refusal, preflight), or forward it upstream once
//! its payment is taken. [`Gateway::decide`] returns the decision; `request_filter` acts on it.

use crate::reply::{Answer, Paying};
use crate::upstream::ProxyGate;
use crate::Gateway;
use paygate_domain::origin_proof::OriginSigner;
use paygate_domain::route_path::lookup_key;
use paygate_domain::{unix_now, ErrorCode};
use paygate_gateway::balancer::Picked;
use paygate_gateway::payments::schemes::{
    Admission, Admitted, Gate, PaidRequest, Receipt, Upstream,
};
use paygate_gateway::payments::Refusal;
use paygate_gateway::route_table::RouteEntry;
use paygate_gateway::upstream_target::UpstreamTarget;
use paygate_gateway::windows::Windows;
use paygate_x402::facilitator::wire::{SandboxReceipt, SettleResponse};
use paygate_x402::payment::ProtocolVersion;
use paygate_x402::siwx;
use paygate_x402::PaymentRequirements;
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
    /// Targets whose connection failed for this request (not tried again for it).
    pub tried: Vec<usize>,
    /// A connection failed and another target is to be picked by `upstream_peer`.
    pub repick: bool,
    /// The payment admitted for it (`None` only for the benchmark build's free pass), until
    /// the payment service has finished with it.
    pub payment: Option<Admitted>,
    /// The receipt the answer carries: an `exact` payment's from its settlement, a channel
    /// voucher's once charged at the answer's head.
    pub receipt: Option<Receipt>,
    /// Signs the forwarded request for the origin (`None` without a master key).
    pub origin: Option<Arc<OriginSigner>>,
    /// Non-streaming routes: when the whole upstream response must have arrived.
    pub deadline: Option<Instant>,
    pub upstream_status: Option<u16>,
    pub body_bytes: u64,
    /// The upstream's answer as it passes, when the payment keeps it under its identifier
    /// (non-streaming routes, up to [`MAX_KEPT_ANSWER_BYTES`]; `None` once larger).
    pub captured: Option<Vec<u8>>,
    pub content_type: Option<String>,
    /// The charge the origin stated in a trailer (`X-Paygate-Charge`), for the answer's end.
    pub stated_trailer: Option<http::HeaderValue>,
    /// The payment's settlement at the answer's head was refused (`upto`): the answer is
    /// replaced by this refusal.
    pub refused: Option<paygate_gateway::payments::Refusal>,
    /// The paid request's span (none while traces are off), and its upstream call's.
    pub trace: tracing::Span,
    pub upstream_span: tracing::Span,
}

/// The largest answer kept under a payment identifier; a larger one is not kept (a retry is
/// then answered by the payment's record, as without an identifier).
pub const MAX_KEPT_ANSWER_BYTES: usize = 256 * 1024;

impl Forwarding {
    /// The answer replacing an origin's answer whose charge could not be settled at its head
    /// (`upto`): the refusal, rendered as any refused payment is.
    pub(crate) fn settlement_refused(&mut self, request_id: &str) -> Option<Answer> {
        let refusal = self.refused.take()?;
        let (requirements, challenge) = self.route.payment.as_ref()?;
        Some(Answer::refused(
            refusal,
            requirements,
            challenge,
            request_id,
        ))
    }

    pub(crate) fn new(
        route: Arc<RouteEntry>,
        (addr, picked): Upstream,
        admission: Option<Admission>,
        origin: Option<Arc<OriginSigner>>,
    ) -> Box<Self> {
        let (payment, receipt) = admission.map_or((None, None), |a| (Some(a.payment), a.receipt));
        let captured = payment
            .as_ref()
            .filter(|p| p.keeps_answer() && !route.route.streaming)
            .map(|_| Vec::new());
        Box::new(Self {
            route,
            addr,
            picked,
            tried: Vec::new(),
            repick: false,
            payment,
            receipt,
            origin,
            deadline: None,
            upstream_status: None,
            body_bytes: 0,
            captured,
            content_type: None,
            stated_trailer: None,
            refused: None,
            trace: tracing::Span::none(),
            upstream_span: tracing::Span::none(),
        })
    }
}

impl Forwarding {
    /// Where the request goes: the picked target, or the route's one.
    pub fn target(&self) -> Option<&UpstreamTarget> {
        match (self.picked, &self.route.balancer) {
            (Some(p), Some(b)) => Some(b.target(p)),
            _ => self.route.upstream.as_ref(),
        }
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

/// The sandbox route's answer to a payment (SPEC 1.8, "accepts test payments"): checked like
/// any payment on its requirements (signature, payee, amount, network, time window), then
/// answered with a fixed body and a receipt that says `sandbox: true` and carries no
/// transaction. Nothing is reserved, settled or counted against a plan; the same payment may be
/// shown again (it can never move money here).
fn sandbox_answer(
    json: &[u8],
    version: ProtocolVersion,
    requirements: &PaymentRequirements,
) -> Result<Answer, Refusal> {
    let payment = paygate_x402::payment::PaymentPayload::from_json(json, version)?;
    let auth = payment.authorization()?;
    paygate_x402::verify::verify(&payment, &auth, requirements, unix_now())
        .map_err(Refusal::Rejected)?;
    let network = requirements.network_name(version);
    let payer = auth.from.to_checksum(None);
    let receipt = SandboxReceipt {
        settle: SettleResponse {
            success: true,
            error_reason: None,
            transaction: String::new(),
            network: network.clone(),
            payer: Some(payer.clone()),
            amount: None,
            extra: None,
        },
        sandbox: true,
    };
    let body = SandboxAnswer {
        sandbox: true,
        message: "paygate sandbox: your test payment is valid. Nothing was settled and no \
                  money moved; a real route settles it on chain and answers with the API.",
        payer,
        network,
        amount: requirements.amount.to_string(),
    };
    use base64::Engine;
    Ok(Answer::Sandbox {
        receipt_header: version.receipt_header(),
        receipt: base64::engine::general_purpose::STANDARD
            .encode(serde_json::to_vec(&receipt).unwrap_or_default()),
        body: serde_json::to_vec(&body).unwrap_or_default().into(),
    })
}

/// The sandbox route's answer body to a valid test payment.
#[derive(serde::Serialize)]
struct SandboxAnswer {
    sandbox: bool,
    message: &'static str,
    payer: String,
    network: String,
    amount: String,
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
                return Decided::plain(Decision::Answer(Answer::Limited(r)));
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

    /// The paid step and everything before it: the challenge when no payment came, the route's
    /// rate limit and body limit, the sandbox; then the payment service admits the payment by
    /// its scheme (the proxy's own checks answered through [`ProxyGate`]).
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
        let Some((requirements, challenge)) = &entry.payment else {
            return Err(Answer::Error(
                ErrorCode::Misconfigured,
                "this organisation has no receiver wallet configured".into(),
            ));
        };
        // A route with an access window declares a fresh sign-in (nonce, time) in every 402:
        // rendered when a 402 is answered, never for a request that is served.
        let windows = self
            .payments
            .windows()
            .filter(|_| !entry.sandbox && entry.route.access_window_seconds.is_some());
        let fresh = || windows.and_then(|w| w.challenge(&entry));
        let refused = |r: Refusal| {
            let fresh = fresh();
            Answer::refused(
                r,
                requirements,
                fresh.as_ref().unwrap_or(challenge),
                request_id,
            )
        };
        let payment = payment_header(req);
        let gate = ProxyGate {
            gateway: self,
            entry: &entry,
            headers: &req.headers,
        };
        // A call that signs in instead of paying settles nothing: served whatever the network's
        // facilitator is doing.
        let sign_in = req.headers.get(siwx::EXTENSION);
        if let (Some(windows), Some(proof), None) = (windows, sign_in, payment) {
            let signed_in = SignedIn {
                org_id: &org_id,
                entry: &entry,
                proof: proof.as_bytes(),
                challenge,
                request_id,
            };
            let admission = self.signed_in(req, &gate, windows, signed_in).await?;
            return Ok(Forwarding::new(
                entry.clone(),
                admission.upstream,
                Some(admission),
                origin,
            ));
        }
        // A network that cannot settle now (no facilitator for it, or it stopped answering the
        // health probe) is a 503 before any challenge: never invite a payment that cannot land.
        if !entry.sandbox && !self.payments.settleable().now(&requirements.network) {
            return Err(Answer::Error(
                ErrorCode::FacilitatorUnavailable,
                Cow::Owned(format!(
                    "payments on {} cannot be settled now; try again later",
                    requirements.network.v1_name
                )),
            ));
        }
        #[cfg(feature = "bench-free-pass")]
        if !entry.sandbox && req.headers.contains_key("x-paygate-bench-free") {
            let to = self
                .upstream_address(&entry, &req.headers, &[])
                .await
                .map_err(refused)?;
            return Ok(Forwarding::new(entry, to, None, origin));
        }
        let Some((version, raw)) = payment else {
            return Err(Answer::Challenge {
                challenge: fresh().unwrap_or_else(|| challenge.clone()),
                refused: None,
            });
        };
        self.limits
            .check_route(&entry.id)
            .map_err(Answer::Limited)?;
        let json =
            paygate_x402::payment::header_json(raw).map_err(|e| refused(Refusal::Malformed(e)))?;
        if entry.sandbox {
            // The sandbox never takes a payment: a valid one is answered, nothing else happens.
            return Err(sandbox_answer(&json, version, requirements).map_err(refused)?);
        }
        if let Some(too_large) = self.body_too_large(req) {
            return Err(too_large);
        }
        let paid = PaidRequest {
            org_id: &org_id,
            entry: &entry,
            plan_limit,
            version,
            json: &json,
        };
        let trace = crate::traces::paid_request(req, &org_id, &entry.id);
        let admit = self.payments.admit(&paid, &gate);
        let admission = match tracing::Instrument::instrument(admit, trace.clone()).await {
            Ok(a) => a,
            Err(unadmitted) => {
                let fresh = fresh();
                let paying = Paying {
                    requirements,
                    challenge: fresh.as_ref().unwrap_or(challenge),
                    request_id,
                };
                return Err(paying.unadmitted(unadmitted));
            }
        };
        let mut forwarding =
            Forwarding::new(entry.clone(), admission.upstream, Some(admission), origin);
        forwarding.trace = trace;
        Ok(forwarding)
    }

    /// A call without payment that signs in (`SIGN-IN-WITH-X`) to a route with an access
    /// window: the route's limits and body size first, the upstream found, then the window
    /// serves it (the call counted, the nonce spent) or the sign-in is answered `402` with why.
    async fn signed_in(
        &self,
        req: &RequestHeader,
        gate: &ProxyGate<'_>,
        windows: &Windows,
        s: SignedIn<'_>,
    ) -> Result<Admission, Answer> {
        let (requirements, _) = s.entry.payment.as_ref().ok_or(Answer::Error(
            ErrorCode::Misconfigured,
            "this organisation has no receiver wallet configured".into(),
        ))?;
        self.limits
            .check_route(&s.entry.id)
            .map_err(Answer::Limited)?;
        if let Some(too_large) = self.body_too_large(req) {
            return Err(too_large);
        }
        // A refusal's 402 carries a fresh sign-in declaration.
        let fresh = || windows.challenge(s.entry);
        let upstream = gate.upstream(false).await.map_err(|r| {
            let c = fresh();
            Answer::refused(
                r,
                requirements,
                c.as_ref().unwrap_or(s.challenge),
                s.request_id,
            )
        })?;
        let window = windows
            .sign_in(s.org_id, &s.entry.route.id, requirements, s.proof)
            .await
            .map_err(|r| {
                let c = fresh();
                Answer::window_refused(
                    r,
                    requirements,
                    c.as_ref().unwrap_or(s.challenge),
                    s.request_id,
                )
            })?;
        if let Some(payer) = paygate_x402::address::parse_address(&window.payer) {
            gate.payer(&payer).map_err(Answer::Limited)?;
        }
        let network = requirements.network_name(ProtocolVersion::V2);
        Ok(Admission {
            upstream,
            payment: Admitted::Window(Box::new(window.clone())),
            receipt: Some(Receipt {
                header: "payment-response",
                value: paygate_gateway::windows::receipt(&window, &network),
                charged: 0,
            }),
        })
    }

    /// A declared body larger than the gateway forwards is refused before any payment.
    pub(crate) fn body_too_large(&self, req: &RequestHeader) -> Option<Answer> {
        let declared = req
            .headers
            .get("content-length")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        declared
            .is_some_and(|n| n > self.settings.max_body_bytes)
            .then(|| {
                Answer::Error(
                    ErrorCode::PayloadTooLarge,
                    "request body is larger than this gateway forwards".into(),
                )
            })
    }
}

/// A sign-in to a route with an access window, as the request brought it.
struct SignedIn<'a> {
    org_id: &'a Arc<str>,
    entry: &'a Arc<RouteEntry>,
    proof: &'a [u8],
    challenge: &'a paygate_x402::Challenge,
    request_id: &'a str,
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

/// The payment header, if any: `PAYMENT-SIGNATURE` (v2) wins over `X-PAYMENT` (v1).
fn payment_header(req: &RequestHeader) -> Option<(ProtocolVersion, &[u8])> {
    if let Some(v) = req.headers.get("payment-signature") {
        return Some((ProtocolVersion::V2, v.as_bytes()));
    }
    req.headers
        .get("x-payment")
        .map(|v| (ProtocolVersion::V1, v.as_bytes()))
}
