//! The headers a forwarded request and its answer lose (hop-by-hop ones, the payment) and the
//! proof of payment the origin gets instead.

use crate::ctx::Ctx;
use http::header::{self, HeaderName};
use paygate_domain::origin_proof::{PAYMENT_ID_HEADER, SIGNATURE_HEADER};
use pingora::http::RequestHeader;
use pingora::prelude::*;

/// Request headers never forwarded upstream: hop-by-hop ones (RFC 9110 7.6.1; Pingora frames
/// bodies itself) and the payment, which is the gateway's business.
pub(crate) const REQUEST_HOP_HEADERS: [HeaderName; 10] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::UPGRADE,
    HeaderName::from_static("x-payment"),
    HeaderName::from_static("payment-signature"),
];
/// Hop-by-hop headers of an upstream response, not passed to the client.
pub(crate) const RESPONSE_HOP_HEADERS: [HeaderName; 7] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::UPGRADE,
];

/// Which of `names` a message carries: one pass over its few headers rather than a lookup per
/// name (most messages carry none of them; a lookup parsed and hashed each name, a visible
/// share of a proxied request's profile, issue 21).
pub(crate) fn carried(headers: &http::HeaderMap, names: &[HeaderName]) -> Vec<HeaderName> {
    headers
        .keys()
        .filter(|k| names.contains(k))
        .cloned()
        .collect()
}

/// Drops an MPP credential (`Authorization: Payment ...`): the payment is the gateway's
/// business, as x402's headers are; any other `Authorization` (the origin's own API key) goes
/// through.
pub(crate) fn drop_payment_credential(upstream: &mut RequestHeader) {
    let is_payment = upstream
        .headers
        .get(header::AUTHORIZATION)
        .is_some_and(|v| paygate_gateway::payments::ways::mpp::carries_credential(v.as_bytes()));
    if is_payment {
        upstream.remove_header(&header::AUTHORIZATION);
    }
}

/// Headers only paygate sets on a forwarded request: whatever a client sent under these names
/// is dropped, so an origin can trust them.
const PROOF_HEADERS: [HeaderName; 2] = [
    HeaderName::from_static(PAYMENT_ID_HEADER),
    HeaderName::from_static(SIGNATURE_HEADER),
];

/// The proof of payment for the origin: the payment id (the same on every forward of one
/// payment, for deduplication) and the signature over method, path, payment id and time.
pub(crate) fn prove_payment(
    upstream: &mut RequestHeader,
    ctx: &mut Ctx,
    path_and_query: &str,
) -> Result<()> {
    for h in carried(&upstream.headers, &PROOF_HEADERS) {
        upstream.remove_header(&h);
    }
    let Some(f) = ctx.forwarding() else {
        return Ok(());
    };
    let Some(id) = f.payment.as_ref().and_then(|p| p.payment_id()) else {
        return Ok(());
    };
    upstream.insert_header(PAYMENT_ID_HEADER, id)?;
    if let Some(signer) = &f.origin {
        let t = paygate_domain::unix_now();
        let sig = signer.header(t, upstream.method.as_str(), path_and_query, id);
        upstream.insert_header(SIGNATURE_HEADER, sig)?;
    }
    Ok(())
}
