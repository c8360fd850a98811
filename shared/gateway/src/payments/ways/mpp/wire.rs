//! MPP's wire forms for the EVM `charge` intent, as the `Payment` HTTP authentication scheme
//! (draft-ryan-httpauth-payment) and `mppx` write them: the challenge in `WWW-Authenticate`
//! (its `request` the canonical JSON of the charge, base64url; its `id` an HMAC-SHA256 over the
//! challenge's fields, so a credential proves which challenge it answers without any state),
//! the credential in `Authorization: Payment` (the echoed challenge and an EIP-3009
//! authorization whose nonce is bound to that challenge), and the `Payment-Receipt`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use paygate_x402::PaymentRequirements;
use serde::Deserialize;

pub(super) const METHOD: &str = "evm";
pub(super) const INTENT: &str = "charge";
/// The longest credential read (the draft's request parameter bound, with room for the rest).
const MAX_CREDENTIAL: usize = 32 * 1024;

type HmacSha256 = Hmac<sha2::Sha256>;

/// The `request` of a route's charge: canonical JSON (RFC 8785: keys sorted, no spaces), as
/// `mppx` serialises it again when it echoes the challenge, base64url without padding.
pub(super) fn request(req: &PaymentRequirements) -> String {
    let json = format!(
        r#"{{"amount":"{}","currency":"{}","methodDetails":{{"chainId":{},"credentialTypes":["authorization"],"decimals":{}}},"recipient":"{}"}}"#,
        req.token_amount(),
        req.network.config.asset.to_checksum(None),
        req.network.config.chain_id,
        req.token.decimals,
        req.pay_to.to_checksum(None),
    );
    URL_SAFE_NO_PAD.encode(json)
}

/// The fields a challenge's `id` binds, in the draft's order: `realm|method|intent|request|
/// expires|digest|opaque`.
fn binding(realm: &str, request: &str, expires: &str, digest: &str, opaque: &str) -> String {
    format!("{realm}|{METHOD}|{INTENT}|{request}|{expires}|{digest}|{opaque}")
}

/// A route's charge as its challenges carry it, rendered once per route change: the `request`,
/// the challenge id's HMAC with the fields before `expires` already absorbed (each challenge
/// then hashes only its own expiry), and the last challenge issued, given again to every `402`
/// of the same millisecond (the same expiry: the same challenge).
pub(super) struct Charge {
    pub request: std::sync::Arc<str>,
    /// `Payment realm="…", method="evm", intent="charge", request="…"`: the header's fixed part.
    head: std::sync::Arc<str>,
    mac: HmacSha256,
    /// The millisecond of the last challenge issued, and its header.
    last: std::sync::Mutex<(i128, Option<http::HeaderValue>)>,
}

impl Charge {
    pub fn new(secret: &[u8], realm: &str, req: &PaymentRequirements) -> Self {
        let request = request(req);
        let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes any key");
        mac.update(format!("{realm}|{METHOD}|{INTENT}|{request}|").as_bytes());
        let head = format!(
            r#"Payment realm="{realm}", method="{METHOD}", intent="{INTENT}", request="{request}""#
        );
        Self {
            request: request.into(),
            head: head.into(),
            mac,
            last: std::sync::Mutex::new((0, None)),
        }
    }

    /// The `WWW-Authenticate` value of a challenge issued now, expiring `window` seconds later:
    /// the one already issued in this millisecond, else a new one.
    pub fn header(&self, window: u64) -> Option<http::HeaderValue> {
        let now = time::OffsetDateTime::now_utc();
        let ms = now.unix_timestamp_nanos() / 1_000_000;
        if let Ok(last) = self.last.try_lock() {
            if let (true, Some(h)) = (last.0 == ms, &last.1) {
                return Some(h.clone());
            }
        }
        let expires = rfc3339_ms(now + time::Duration::seconds(window as i64));
        let header = http::HeaderValue::from_str(&self.challenge_expiring(&expires)).ok()?;
        if let Ok(mut last) = self.last.try_lock() {
            *last = (ms, Some(header.clone()));
        }
        Some(header)
    }

    /// The `WWW-Authenticate` value of a challenge expiring at `expires` (RFC 3339, to the
    /// millisecond: its `expires`, which the id binds, tells challenges apart, as `mppx`'s own
    /// server does).
    pub fn challenge_expiring(&self, expires: &str) -> String {
        let mut mac = self.mac.clone();
        mac.update(expires.as_bytes());
        mac.update(b"||");
        let id = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
        let mut header = String::with_capacity(self.head.len() + 96);
        header.push_str(&self.head);
        header.push_str(", id=\"");
        header.push_str(&id);
        header.push_str("\", expires=\"");
        header.push_str(expires);
        header.push('"');
        header
    }
}

/// `at` as RFC 3339 to the millisecond (`2026-11-29T00:51:07.123Z`), the date and time of day
/// formatted once a second per thread.
fn rfc3339_ms(at: time::OffsetDateTime) -> String {
    use std::cell::RefCell;
    thread_local! {
        static SECOND: RefCell<(i64, String)> = const { RefCell::new((i64::MIN, String::new())) };
    }
    let now = at;
    let second = now.unix_timestamp();
    let millis = now.millisecond();
    SECOND.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != second {
            let format =
                time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]");
            cached.1 = now.format(&format).unwrap_or_default();
            cached.0 = second;
        }
        format!("{}.{millis:03}Z", cached.1)
    })
}

/// The challenge a credential echoes.
#[derive(Debug, Deserialize)]
pub(super) struct Echoed {
    pub id: String,
    pub realm: String,
    pub method: String,
    pub intent: String,
    pub request: String,
    #[serde(default)]
    pub expires: Option<String>,
    #[serde(default)]
    pub digest: Option<String>,
    #[serde(default)]
    pub opaque: Option<String>,
    /// Another credential header than `Authorization` (never issued here: binds nothing).
    #[serde(default)]
    pub header: Option<String>,
}

impl Echoed {
    /// Whether `secret` bound this challenge's fields to its id (constant time).
    pub fn issued_with(&self, secret: &[u8]) -> bool {
        let Ok(id) = URL_SAFE_NO_PAD.decode(self.id.trim_end_matches('=')) else {
            return false;
        };
        if self.header.is_some() {
            return false;
        }
        let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes any key");
        let (expires, digest, opaque) = (
            self.expires.as_deref().unwrap_or_default(),
            self.digest.as_deref().unwrap_or_default(),
            self.opaque.as_deref().unwrap_or_default(),
        );
        mac.update(binding(&self.realm, &self.request, expires, digest, opaque).as_bytes());
        mac.verify_slice(&id).is_ok()
    }
}

/// An EIP-3009 authorization as the `charge` credential carries it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Authorization {
    #[serde(rename = "type")]
    pub kind: String,
    pub from: String,
    pub to: String,
    pub value: String,
    pub valid_after: String,
    pub valid_before: String,
    pub nonce: String,
    pub signature: String,
}

/// A credential: the challenge it answers and its payload.
#[derive(Debug, Deserialize)]
pub(super) struct Credential {
    pub challenge: Echoed,
    pub payload: serde_json::Value,
    #[serde(default)]
    pub source: Option<String>,
}

/// The `Payment` credential in an `Authorization` value (several schemes may be listed).
pub(super) fn payment_credential(value: &[u8]) -> Option<&[u8]> {
    let text = std::str::from_utf8(value).ok()?;
    text.split(',').map(str::trim).find_map(|s| {
        let (scheme, rest) = s.split_once(char::is_whitespace)?;
        scheme
            .eq_ignore_ascii_case("payment")
            .then(|| rest.trim().as_bytes())
    })
}

/// Reads a credential (base64url JSON, padded or not).
pub(super) fn credential(raw: &[u8]) -> Result<Credential, &'static str> {
    if raw.len() > MAX_CREDENTIAL {
        return Err("the credential is too large");
    }
    let trimmed: Vec<u8> = raw.iter().copied().filter(|b| *b != b'=').collect();
    let json = URL_SAFE_NO_PAD
        .decode(&trimmed)
        .map_err(|_| "the credential is not base64url")?;
    serde_json::from_slice(&json).map_err(|_| "the credential is not a Payment credential's JSON")
}

/// The `Payment-Receipt` of a charge settled in `transaction` at `timestamp` (RFC 3339).
pub(super) fn receipt(transaction: &str, timestamp: &str) -> String {
    let json = serde_json::json!({
        "method": METHOD,
        "reference": transaction,
        "status": "success",
        "timestamp": timestamp,
    });
    URL_SAFE_NO_PAD.encode(json.to_string())
}

/// The authorization nonce a credential for challenge `id` at `realm` must carry: keccak256 of
/// the id and realm, so an authorization answers one challenge only.
pub(super) fn challenge_nonce(id: &str, realm: &str) -> alloy_primitives::B256 {
    alloy_primitives::keccak256(format!("{id}{realm}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The auth-params of a `WWW-Authenticate` value.
    fn params(header: &str) -> std::collections::BTreeMap<String, String> {
        header
            .trim_start_matches("Payment ")
            .split(", ")
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
            .collect()
    }

    fn echoed(p: &std::collections::BTreeMap<String, String>) -> Echoed {
        Echoed {
            id: p["id"].clone(),
            realm: p["realm"].clone(),
            method: p["method"].clone(),
            intent: p["intent"].clone(),
            request: p["request"].clone(),
            expires: Some(p["expires"].clone()),
            digest: None,
            opaque: p.get("opaque").cloned(),
            header: None,
        }
    }

    fn requirements() -> PaymentRequirements {
        let networks = paygate_x402::network::Networks::from_config(
            &paygate_x402::network::builtin_networks(),
        );
        let (network, token) = networks
            .resolve("base-sepolia")
            .unwrap()
            .with_token("USDC")
            .unwrap();
        PaymentRequirements {
            network,
            amount: paygate_x402::money::UsdcAmount(10_000),
            pay_to: alloy_primitives::Address::repeat_byte(9),
            resource: String::new(),
            description: String::new(),
            mime_type: String::new(),
            max_timeout_seconds: 60,
            token,
        }
    }

    #[test]
    fn an_issued_challenge_verifies_and_any_changed_field_does_not() {
        let secret = b"s3cret";
        let charge = Charge::new(secret, "api.example", &requirements());
        let issued = params(&charge.challenge_expiring("2026-01-01T00:00:00.000Z"));
        assert_eq!(issued["request"], *charge.request);
        let request = URL_SAFE_NO_PAD.decode(&issued["request"]).unwrap();
        let request: serde_json::Value = serde_json::from_slice(&request).unwrap();
        assert_eq!(request["amount"], "10000");
        assert_eq!(request["methodDetails"]["chainId"], 84532);
        let check = |f: &dyn Fn(&mut Echoed)| {
            let mut e = echoed(&issued);
            f(&mut e);
            e.issued_with(secret)
        };
        assert!(check(&|_| {}));
        assert!(!check(&|e| e.request = "eyJhIjoxfQ".into()));
        assert!(!check(&|e| e.expires = Some("2027-01-01T00:00:00Z".into())));
        assert!(!check(&|e| e.opaque = Some("e30".into())));
        assert!(!check(&|e| e.digest = Some("sha-256=x".into())));
        assert!(!check(&|e| e.realm = "other.example".into()));
        assert!(!check(&|e| e.id = "AAAA".into()));
        assert!(!echoed(&issued).issued_with(b"another secret"));
        // Challenges expiring at another millisecond have another id.
        let again = params(&charge.challenge_expiring("2026-01-01T00:00:00.001Z"));
        assert_ne!(again["id"], issued["id"]);
        let fresh = charge.header(300).unwrap();
        let fresh = params(fresh.to_str().unwrap());
        assert!(fresh["id"] != issued["id"]);
        assert!(
            fresh["expires"].ends_with('Z') && fresh["expires"].len() == 24,
            "{fresh:?}"
        );
    }

    #[test]
    fn a_credential_is_found_among_schemes_and_read_padded_or_not() {
        assert_eq!(
            payment_credential(b"Bearer x, Payment abc"),
            Some(&b"abc"[..])
        );
        assert_eq!(payment_credential(b"payment   abc"), Some(&b"abc"[..]));
        assert_eq!(payment_credential(b"Bearer abc"), None);
        let json = r#"{"challenge":{"id":"i","realm":"r","method":"evm","intent":"charge","request":"q"},"payload":{}}"#;
        let unpadded = URL_SAFE_NO_PAD.encode(json);
        let padded = base64::engine::general_purpose::URL_SAFE.encode(json);
        assert!(credential(unpadded.as_bytes()).is_ok());
        assert!(credential(padded.as_bytes()).is_ok());
        assert!(credential(b"!!").is_err());
        assert!(credential(&vec![b'A'; MAX_CREDENTIAL + 1]).is_err());
    }
}
