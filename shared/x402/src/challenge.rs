//! A route's `402` challenge, rendered once per route change so the hot path only copies
//! bytes: the seed `X-Payment-Requirements` header, the v1 body and the v2 `PAYMENT-REQUIRED`
//! header.

use crate::extensions::Extensions;
use crate::requirements::{Offer, PaymentRequirements};
use crate::{v1, v2};

/// The three renderings of one route's `402`, computed once per route change so the hot path
/// only copies bytes.
#[derive(Debug, Clone)]
pub struct Challenge {
    /// JSON of the v1 requirement, for the `X-Payment-Requirements` header (none when the
    /// route does not offer `exact`, the only scheme v1 carries). Rendered once per route
    /// change; a clone per request is a reference-count increment.
    pub requirements_header: Option<http::HeaderValue>,
    /// Base64 JSON of the v2 `PaymentRequired`, for the `PAYMENT-REQUIRED` header.
    pub payment_required_header: http::HeaderValue,
    /// The v1 JSON body `{x402Version: 1, error, accepts}`.
    pub body: bytes::Bytes,
    /// The v2 document's `extensions`, kept to render the challenge again with another `error`.
    pub extensions: std::sync::Arc<Extensions>,
    /// The schemes offered.
    pub offer: Offer,
    /// Another protocol's challenge beside x402's, in `WWW-Authenticate` (MPP's `Payment`
    /// challenge), rendered for each `402` by the way that offers it; none in the route's
    /// rendered challenge.
    pub www_authenticate: Option<http::HeaderValue>,
    /// Whether x402's forms are offered (its headers written, its body the x402 JSON): false
    /// on a route that turned x402 off, whose body is then another protocol's.
    pub x402: bool,
}

/// The JSON inside a base64 x402 header (`PAYMENT-REQUIRED`, `PAYMENT-RESPONSE`), if it is one.
pub fn b64_json(header: &str) -> Option<serde_json::Value> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(header.trim())
        .ok()?;
    serde_json::from_slice(&raw).ok()
}

/// A rendered header value. JSON from serde_json has no control characters, so this cannot
/// fail; an empty value stands in if it ever did.
fn header_value(s: String) -> http::HeaderValue {
    http::HeaderValue::from_maybe_shared(bytes::Bytes::from(s))
        .unwrap_or_else(|_| http::HeaderValue::from_static(""))
}

/// The `error` text of a challenge sent because no payment came with the request.
pub const NO_PAYMENT_ERROR: &str = "X-PAYMENT header is required";

/// The v1 forms of a challenge offering `offer`: `exact` is the only scheme x402 v1 carries, so
/// a route that does not offer it has none (a v1 client is never offered what is refused).
pub fn v1_accepts(req: &PaymentRequirements, offer: &Offer) -> Vec<v1::PaymentRequirementsV1> {
    if offer.exact() {
        vec![req.to_v1()]
    } else {
        Vec::new()
    }
}

impl Challenge {
    /// Renders the challenge for `req` with the given `error` text.
    pub fn render(req: &PaymentRequirements, error: &str) -> Self {
        Self::render_offered(req, error, Default::default(), Offer::default())
    }

    /// Renders the challenge offering the schemes of `offer` (the v1 forms only ever carry
    /// `exact`: the other schemes are v2's), declaring `extensions`.
    pub fn render_offered(
        req: &PaymentRequirements,
        error: &str,
        extensions: std::sync::Arc<Extensions>,
        offer: Offer,
    ) -> Self {
        let accepts = v1_accepts(req, &offer);
        let requirements_header = accepts
            .first()
            .map(|r| header_value(serde_json::to_string(r).unwrap_or_default()));
        let body = serde_json::to_vec(&v1::PaymentRequiredV1 {
            x402_version: 1,
            error: error.to_string(),
            accepts,
        })
        .unwrap_or_default();
        let v2_doc = req.payment_required_offered(error, &extensions, &offer);
        Self {
            www_authenticate: None,
            x402: true,
            requirements_header,
            payment_required_header: header_value(v2::header(&v2_doc)),
            body: body.into(),
            extensions,
            offer,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::UsdcAmount;
    use crate::network::{builtin_networks, Networks};
    use crate::requirements::{BatchTerms, RequirementsError};
    use alloy_primitives::Address;

    fn req(network: &str) -> PaymentRequirements {
        PaymentRequirements {
            network: Networks::from_config(&builtin_networks())
                .resolve(network)
                .unwrap()
                .clone(),
            amount: UsdcAmount(10_000),
            pay_to: "0x209693bc6afc0c5328ba36faf03c514ef312287c"
                .parse()
                .unwrap(),
            resource: "http://127.0.0.1:8402/gateway/acme/echo".into(),
            description: "Echo".into(),
            mime_type: String::new(),
            max_timeout_seconds: 60,
            token: Default::default(),
        }
    }

    #[test]
    fn a_route_without_exact_offers_no_v1_form() {
        let escrow = crate::requirements::Offered::AuthCapture(crate::requirements::EscrowTerms {
            operator: Address::repeat_byte(1),
            capture_window: 900,
            refund_window: 0,
        });
        let c = Challenge::render_offered(
            &req("base-sepolia"),
            NO_PAYMENT_ERROR,
            Default::default(),
            Offer(vec![escrow]),
        );
        assert!(c.requirements_header.is_none());
        let body: serde_json::Value = serde_json::from_slice(&c.body).unwrap();
        assert_eq!(body["accepts"], serde_json::json!([]));
        let v2 = b64_json(c.payment_required_header.to_str().unwrap()).unwrap();
        assert_eq!(v2["accepts"][0]["scheme"], "auth-capture");
        assert_eq!(v2["accepts"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn v1_body_uses_v1_names_and_absolute_resource() {
        // Given with the CAIP-2 spelling, still rendered with the v1 name in v1.
        let c = Challenge::render(&req("eip155:84532"), NO_PAYMENT_ERROR);
        let body: serde_json::Value = serde_json::from_slice(&c.body).unwrap();
        assert_eq!(body["x402Version"], 1);
        assert_eq!(body["error"], NO_PAYMENT_ERROR);
        let a = &body["accepts"][0];
        assert_eq!(a["scheme"], "exact");
        assert_eq!(a["network"], "base-sepolia");
        assert_eq!(a["maxAmountRequired"], "10000");
        assert_eq!(a["resource"], "http://127.0.0.1:8402/gateway/acme/echo");
        assert_eq!(a["description"], "Echo");
        assert_eq!(a["mimeType"], "");
        assert_eq!(a["payTo"], "0x209693Bc6afc0C5328bA36FaF03C514EF312287C");
        assert_eq!(a["maxTimeoutSeconds"], 60);
        assert_eq!(a["asset"], "0x036CbD53842c5426634e7929541eC2318f3dCF7e");
        assert_eq!(a["extra"]["name"], "USDC");
        assert_eq!(a["extra"]["version"], "2");
        assert!(a.get("outputSchema").is_none(), "no null outputSchema");
        let header: serde_json::Value =
            serde_json::from_str(c.requirements_header.as_ref().unwrap().to_str().unwrap())
                .unwrap();
        assert_eq!(&header, a);
    }

    #[test]
    fn requirements_read_back_equal_the_rendered_ones() {
        let r = req("base-sepolia");
        let exact = r.to_v2();
        let back: v2::PaymentRequirementsV2 =
            serde_json::from_value(serde_json::to_value(&exact).unwrap()).unwrap();
        assert_eq!(back, exact);
        let terms = BatchTerms {
            receiver_authorizer: Address::repeat_byte(7),
            withdraw_delay: 900,
        };
        let batch = r.to_v2_batch(&terms);
        let json = serde_json::to_value(&batch).unwrap();
        assert_eq!(json["extra"]["withdrawDelay"], 900);
        let back: v2::PaymentRequirementsV2 = serde_json::from_value(json).unwrap();
        assert_eq!(back, batch);
    }

    #[test]
    fn v2_header_uses_caip2_and_amount() {
        use base64::Engine;
        let c = Challenge::render(&req("base"), NO_PAYMENT_ERROR);
        let raw = base64::engine::general_purpose::STANDARD
            .decode(c.payment_required_header.as_bytes())
            .unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(doc["x402Version"], 2);
        assert_eq!(
            doc["resource"]["url"],
            "http://127.0.0.1:8402/gateway/acme/echo"
        );
        let a = &doc["accepts"][0];
        assert_eq!(a["network"], "eip155:8453");
        assert_eq!(a["amount"], "10000");
        assert_eq!(a["asset"], "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913");
        assert_eq!(a["extra"]["name"], "USD Coin");
        assert!(a.get("maxAmountRequired").is_none());
        assert!(c.payment_required_header.len() < 8 * 1024);
    }

    #[test]
    fn wire_requirements_are_read_strictly() {
        use crate::payment::ProtocolVersion::{V1, V2};
        let nets = Networks::from_config(&builtin_networks());
        let v1 = serde_json::to_value(req("base-sepolia").to_v1()).unwrap();
        let back = PaymentRequirements::from_wire(&v1, V1, &nets).unwrap();
        assert_eq!(back.amount, UsdcAmount(10_000));
        assert_eq!(back.network.v1_name, "base-sepolia");
        let v2 = serde_json::to_value(req("base").to_v2()).unwrap();
        let back = PaymentRequirements::from_wire(&v2, V2, &nets).unwrap();
        assert_eq!(back.network.caip2, "eip155:8453");
        // v2 has no maxAmountRequired; v1 has no amount.
        assert_eq!(
            PaymentRequirements::from_wire(&v2, V1, &nets).unwrap_err(),
            RequirementsError::Field("maxAmountRequired")
        );
        let cases: [(&str, serde_json::Value, RequirementsError); 5] = [
            (
                "network",
                "solana".into(),
                RequirementsError::UnsupportedNetwork("solana".into()),
            ),
            (
                "asset",
                "0x0000000000000000000000000000000000000001".into(),
                RequirementsError::UnsupportedAsset(
                    "0x0000000000000000000000000000000000000001".into(),
                ),
            ),
            ("payTo", "nope".into(), RequirementsError::Field("payTo")),
            (
                "maxAmountRequired",
                "-1".into(),
                RequirementsError::Field("maxAmountRequired"),
            ),
            (
                "extra",
                serde_json::json!({"name": "Evil", "version": "2"}),
                RequirementsError::WrongDomain,
            ),
        ];
        for (field, value, want) in cases {
            let mut bad = v1.clone();
            bad[field] = value;
            assert_eq!(
                PaymentRequirements::from_wire(&bad, V1, &nets).unwrap_err(),
                want,
                "{field}"
            );
        }
    }
}
