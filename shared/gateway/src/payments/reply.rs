//! What the gateway answers itself ([`Answer`]), decided before anything is written, and the one
//! rendering of what the payment service did not admit ([`unadmitted`]): the route's challenge,
//! a refusal ([`refused`]: the challenge again with the reason, in the x402 version the caller
//! spoke, or the refusal's error), or an answer the payment side gave itself. Outside the proxy
//! (issue 52), beside the refusals it renders: the proxy writes these answers (its
//! `answer.rs`), and every other caller of the payment service renders a refusal here too.

use super::way::{Refused, Served, Unadmitted};
use super::{Refusal, Stop};
use crate::metrics::Outcome;
use crate::route_entry::RouteEntry;
use paygate_domain::{ErrorBody, ErrorCode};
use paygate_x402::facilitator::wire::RefusedPaymentBody;
use paygate_x402::payment::ProtocolVersion;
use paygate_x402::Challenge;
use std::borrow::Cow;

/// An answer the gateway writes itself.
pub enum Answer {
    /// `204` to a CORS preflight.
    Preflight,
    /// `402` with a challenge: the route's own when no payment came (`refused: None`), or one
    /// rendered with the reason a payment was refused.
    Challenge {
        challenge: Challenge,
        refused: Option<ErrorCode>,
        /// Its body is problem details (`application/problem+json`: a refused MPP
        /// credential), not x402's JSON.
        problem: bool,
    },
    /// A JSON error.
    Error(ErrorCode, Cow<'static, str>),
    /// A JSON error with `Retry-After` when it says when to come back (a rate limit's `429`).
    Stopped(Stop),
    /// An answer of the payment side's own, nothing forwarded (the sandbox's, a refund's, an
    /// answer kept under a payment identifier).
    Served(Box<Served>),
}

/// The answer to a request the payment service did not admit.
pub fn unadmitted(u: Unadmitted, entry: &RouteEntry, request_id: &str) -> Answer {
    match u {
        Unadmitted::Challenge(challenge) => Answer::Challenge {
            problem: !challenge.x402,
            challenge,
            refused: None,
        },
        Unadmitted::Refused(r) => refused(*r, entry, request_id),
        Unadmitted::Served(s) => Answer::Served(s),
    }
}

/// A refusal answered as an error (its code, words and `Retry-After`).
pub fn stopped(r: &Refusal) -> Answer {
    Answer::Stopped(Stop {
        code: r.code(),
        message: r.to_string(),
        retry_after: r.retry_after(),
    })
}

/// The one rendering of a refusal: when the payer can pay (or sign in) anew, the challenge it is
/// refused against, rendered again with the reason as its `error` and the state a payer resyncs
/// to, the body in the x402 version the caller spoke (`412` when the payer must first approve
/// Permit2, else `402`); otherwise the refusal's error.
pub fn refused(r: Refused, entry: &RouteEntry, request_id: &str) -> Answer {
    if r.protocol == paygate_domain::model::PaymentProtocol::Mpp {
        if let Some(answer) = problem(&r, request_id) {
            return answer;
        }
    }
    let Refused {
        refusal,
        challenge,
        version,
        ..
    } = r;
    if let (Refusal::Unconfirmed { transaction, payer }, Some((req, _))) =
        (&refusal, &entry.payment)
    {
        return unconfirmed(&refusal, *transaction, *payer, req, version, request_id);
    }
    let (Some(reason), Some(challenge), Some((req, _))) =
        (refusal.challenge_reason(), challenge, &entry.payment)
    else {
        return stopped(&refusal);
    };
    let code = refusal.code();
    let mut doc = req.payment_required_offered(reason, &challenge.extensions, &challenge.offer);
    refusal.correct(&mut doc.accepts);
    let message = refusal.to_string();
    let server = ErrorBody::new(code, &message, request_id);
    let body = match version {
        ProtocolVersion::V1 => serde_json::to_vec(&RefusedPaymentBody {
            server,
            x402_version: 1,
            error: reason,
            accepts: paygate_x402::v1_accepts(req, &challenge.offer),
        }),
        ProtocolVersion::V2 => serde_json::to_vec(&RefusedPaymentBody {
            server,
            x402_version: 2,
            error: reason,
            accepts: &doc.accepts,
        }),
    };
    let header = paygate_x402::v2::header(&doc);
    Answer::Challenge {
        challenge: Challenge {
            requirements_header: challenge.requirements_header,
            payment_required_header: http::HeaderValue::from_str(&header)
                .unwrap_or(challenge.payment_required_header),
            body: body.unwrap_or_default().into(),
            extensions: challenge.extensions,
            offer: challenge.offer,
            www_authenticate: challenge.www_authenticate,
            x402: challenge.x402,
        },
        refused: Some(code),
        problem: false,
    }
}

/// A refused MPP credential, in the draft's problem details (its type, title, status and
/// detail, beside paygate's `code`, `message` and `requestId`), with the route's challenges
/// again: a fresh `WWW-Authenticate` to pay anew, and x402's. `None` for a refusal that is the
/// gateway's error (rendered as for x402).
fn problem(r: &Refused, request_id: &str) -> Option<Answer> {
    use super::ways::mpp::problem;
    let (kind, title, status) = problem::of(&r.refusal)?;
    let challenge = r.challenge.clone()?;
    let code = r.refusal.code();
    let detail = problem::detail(&r.refusal);
    let body = serde_json::json!({
        "type": format!("https://paymentauth.org/problems/{kind}"),
        "title": title,
        "status": status,
        "detail": detail,
        "code": code.as_str(),
        "message": detail,
        "requestId": request_id,
    });
    Some(Answer::Challenge {
        challenge: Challenge {
            body: body.to_string().into(),
            ..challenge
        },
        refused: Some(code),
        problem: true,
    })
}

/// A payment sent and not confirmed in the request's time: `504 SETTLEMENT_PENDING` (never a
/// `402`: paying again could pay twice), with the receipt header in x402's pending form
/// (`success: false`, `errorReason: "settlement_pending"`, the transaction sent), so the payer
/// knows what to watch; reconciliation finishes it and a retry of the same payment is then
/// served.
fn unconfirmed(
    refusal: &Refusal,
    transaction: alloy_primitives::B256,
    payer: alloy_primitives::Address,
    req: &paygate_x402::PaymentRequirements,
    version: ProtocolVersion,
    request_id: &str,
) -> Answer {
    use base64::Engine;
    let receipt = paygate_x402::facilitator::wire::SettleResponse::pending(
        transaction,
        req.network_name(version),
        payer,
    );
    let code = refusal.code();
    let message = refusal.to_string();
    let body = ErrorBody::new(code, &message, request_id);
    Answer::Served(Box::new(Served {
        outcome: code.as_str(),
        status: code.status(),
        content_type: Some("application/json".into()),
        body: serde_json::to_vec(&body).unwrap_or_default(),
        receipt: (
            version.receipt_header().to_string(),
            base64::engine::general_purpose::STANDARD
                .encode(serde_json::to_vec(&receipt).unwrap_or_default()),
        ),
        mark: None,
    }))
}

impl Answer {
    /// The status it is answered with.
    pub fn status(&self) -> u16 {
        match self {
            Self::Preflight => 204,
            Self::Challenge {
                refused: Some(c @ ErrorCode::Permit2ApprovalRequired),
                ..
            } => c.status(),
            Self::Challenge { .. } => 402,
            Self::Error(code, _) | Self::Stopped(Stop { code, .. }) => code.status(),
            Self::Served(s) => s.status,
        }
    }

    /// The outcome's name for the access log and its kind for the counters.
    pub fn outcome(&self) -> (&'static str, Outcome) {
        match self {
            Self::Preflight => ("PREFLIGHT", Outcome::Other),
            Self::Served(s) => (s.outcome, Outcome::Other),
            Self::Challenge { refused: None, .. } => ("PAYMENT_REQUIRED", Outcome::Challenge),
            Self::Challenge {
                refused: Some(code),
                ..
            }
            | Self::Error(code, _)
            | Self::Stopped(Stop { code, .. }) => (
                code.as_str(),
                if code.status() == 402 {
                    Outcome::Rejected
                } else {
                    Outcome::Other
                },
            ),
        }
    }
}
