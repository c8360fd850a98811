//! x402's `sign-in-with-x` extension (CAIP-122), EVM side: what a `402` declares (the message
//! fields the server fixes, a fresh nonce and time), and the caller's proof in the
//! `SIGN-IN-WITH-X` header (base64 JSON of the message fields and the signature), checked as
//! the official server does: domain and URI against the configured public origin (never the
//! request's Host), `issuedAt` fresh, `expirationTime` / `notBefore` honoured, then the SIWE
//! (EIP-4361) message rebuilt by the `siwe` crate and its EIP-191 signature recovered. A
//! signature the address's own key did not make may still be a smart wallet's: the caller asks
//! the chain (EIP-1271) with [`SignIn::eip1271_check`]. Whether the signer paid, and the nonce's
//! single use, are the store's to decide.

use alloy_primitives::{Address, Bytes, B256};
use serde::Deserialize;
use time::OffsetDateTime;

/// The extension's key in a `402`'s `extensions`, and the request header's name.
pub const EXTENSION: &str = "sign-in-with-x";

/// How old a sign-in's `issuedAt` may be (the official server's default, five minutes).
pub const MAX_AGE_SECS: u64 = 300;

/// How far in the future a sign-in's `issuedAt` may be: the caller's clock may run a little
/// ahead of this server's.
pub const CLOCK_SKEW_SECS: u64 = 30;

/// The statement a challenge asks the payer to sign.
pub const STATEMENT: &str = "Sign in to use the access you paid for";

/// The configured public origin a sign-in must name: `host[:port]` (the SIWE domain) and
/// `scheme://host[:port]` (what the URI's origin must be).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub domain: String,
    pub origin: String,
}

impl Origin {
    /// The origin of a base URL such as `https://api.example.com` (a path is ignored).
    pub fn of(base_url: &str) -> Option<Self> {
        let url = url::Url::parse(base_url).ok()?;
        let host = url.host_str()?;
        let domain = match url.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_string(),
        };
        Some(Self {
            origin: format!("{}://{domain}", url.scheme()),
            domain,
        })
    }
}

/// The extension a `402` carries for a route with an access window: the fields the server fixes
/// (domain, the route's URI, a fresh nonce, the time) and the chain the payer signs for.
pub fn declaration(
    origin: &Origin,
    uri: &str,
    chain_id: &str,
    now: OffsetDateTime,
) -> serde_json::Value {
    let expires = now + time::Duration::seconds(MAX_AGE_SECS as i64);
    serde_json::json!({
        "info": {
            "domain": origin.domain,
            "uri": uri,
            "statement": STATEMENT,
            "version": "1",
            "nonce": siwe::generate_nonce(),
            "issuedAt": iso(now),
            "expirationTime": iso(expires),
            "resources": [uri],
        },
        "supportedChains": [{"chainId": chain_id, "type": "eip191"}],
        "schema": schema(),
    })
}

/// ISO 8601 with milliseconds and `Z`, as JavaScript's `toISOString` writes it.
fn iso(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

/// The JSON Schema of the proof, as the extension declares it.
fn schema() -> serde_json::Value {
    let s = |format: Option<&str>| match format {
        Some(f) => serde_json::json!({"type": "string", "format": f}),
        None => serde_json::json!({"type": "string"}),
    };
    serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "domain": s(None), "address": s(None), "statement": s(None), "uri": s(Some("uri")),
            "version": s(None), "chainId": s(None), "type": s(None), "nonce": s(None),
            "issuedAt": s(Some("date-time")), "expirationTime": s(Some("date-time")),
            "notBefore": s(Some("date-time")), "requestId": s(None),
            "resources": {"type": "array", "items": s(Some("uri"))},
            "signature": s(None),
        },
        "required": ["domain", "address", "uri", "version", "chainId", "type", "nonce",
                     "issuedAt", "signature"],
    })
}

/// The caller's proof, as the `SIGN-IN-WITH-X` header carries it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignIn {
    pub domain: String,
    pub address: String,
    #[serde(default)]
    pub statement: Option<String>,
    pub uri: String,
    pub version: String,
    pub chain_id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub nonce: String,
    pub issued_at: String,
    #[serde(default)]
    pub expiration_time: Option<String>,
    #[serde(default)]
    pub not_before: Option<String>,
    #[serde(default)]
    pub request_id: Option<String>,
    #[serde(default)]
    pub resources: Option<Vec<String>>,
    pub signature: String,
}

/// Why a sign-in is refused: the official codes (`invalidReason`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignInError {
    #[error("the SIGN-IN-WITH-X header is not base64 JSON of a sign-in: {0}")]
    Malformed(String),
    #[error("the sign-in names domain {got:?}; this gateway is {expected:?}")]
    DomainMismatch { expected: String, got: String },
    #[error("the sign-in's URI {0:?} is not this route's")]
    UriMismatch(String),
    #[error("the sign-in's issuedAt is not an RFC 3339 time")]
    IssuedAt,
    #[error("the sign-in was issued more than {MAX_AGE_SECS} seconds ago")]
    TooOld,
    #[error("the sign-in's issuedAt is in the future")]
    InFuture,
    #[error("the sign-in's expirationTime is not an RFC 3339 time")]
    ExpirationTime,
    #[error("the sign-in has expired")]
    Expired,
    #[error("the sign-in's notBefore is not an RFC 3339 time")]
    NotBefore,
    #[error("the sign-in is not valid yet (notBefore)")]
    NotYetValid,
    #[error("the sign-in's nonce is used, or is not 8 to 64 letters and digits")]
    Nonce,
    #[error("the sign-in's chainId {0:?} is not an eip155 chain")]
    ChainId(String),
    #[error("this route's sign-ins are for chain {expected}, not {got}")]
    UnsupportedChain { expected: String, got: String },
    #[error("the sign-in's signature is not hex of a signature")]
    MalformedSignature,
    #[error("the sign-in's signature is not the address's")]
    Signature,
    #[error("the signature could not be checked on chain now: {0}")]
    Verifier(String),
}

impl SignInError {
    /// The reason code, as x402's sign-in-with-x names it.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Malformed(_) => "invalid_siwx_payload",
            Self::DomainMismatch { .. } => "invalid_siwx_domain_mismatch",
            Self::UriMismatch(_) => "invalid_siwx_uri_mismatch",
            Self::IssuedAt => "invalid_siwx_issued_at",
            Self::TooOld => "invalid_siwx_issued_at_too_old",
            Self::InFuture => "invalid_siwx_issued_at_in_future",
            Self::ExpirationTime => "invalid_siwx_expiration_time",
            Self::Expired => "invalid_siwx_expired",
            Self::NotBefore => "invalid_siwx_not_before",
            Self::NotYetValid => "invalid_siwx_not_yet_valid",
            Self::Nonce => "invalid_siwx_nonce",
            Self::ChainId(_) => "invalid_siwx_chain_id",
            Self::UnsupportedChain { .. } => "invalid_siwx_unsupported_chain",
            Self::MalformedSignature => "invalid_siwx_malformed_signature",
            Self::Signature => "invalid_siwx_signature",
            Self::Verifier(_) => "invalid_siwx_verifier_error",
        }
    }
}

/// A sign-in whose fields passed [`SignIn::check`]: the SIWE message, the signer it names, and
/// until when its nonce must be kept (after that it is refused as too old anyway).
pub struct Checked {
    pub message: siwe::Message,
    pub address: Address,
    pub nonce_until: u64,
}

/// What the signature came to: the address's own key made it, or only the chain can say
/// (EIP-1271: `isValidSignature(hash, signature)` on the address).
pub enum Signer {
    Key(Address),
    AskChain {
        address: Address,
        hash: B256,
        signature: Bytes,
    },
}

fn rfc3339(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()
}

impl SignIn {
    /// The proof in a `SIGN-IN-WITH-X` header value.
    pub fn from_header(raw: &[u8]) -> Result<Self, SignInError> {
        use base64::Engine;
        let json = base64::engine::general_purpose::STANDARD
            .decode(raw.trim_ascii())
            .map_err(|_| SignInError::Malformed("not base64".into()))?;
        serde_json::from_slice(&json).map_err(|e| SignInError::Malformed(e.to_string()))
    }

    /// Checks what needs no signature, for the route at `uri` on chain `chain_id` (CAIP-2)
    /// under the configured `origin`, at `now`; builds the SIWE message.
    pub fn check(
        &self,
        origin: &Origin,
        uri: &str,
        chain_id: &str,
        now: OffsetDateTime,
    ) -> Result<Checked, SignInError> {
        if self.domain != origin.domain {
            return Err(SignInError::DomainMismatch {
                expected: origin.domain.clone(),
                got: self.domain.clone(),
            });
        }
        if self.uri != uri {
            return Err(SignInError::UriMismatch(self.uri.clone()));
        }
        let issued = rfc3339(&self.issued_at).ok_or(SignInError::IssuedAt)?;
        let age = (now - issued).whole_seconds();
        if age > MAX_AGE_SECS as i64 {
            return Err(SignInError::TooOld);
        }
        if -age > CLOCK_SKEW_SECS as i64 {
            return Err(SignInError::InFuture);
        }
        if let Some(e) = &self.expiration_time {
            if rfc3339(e).ok_or(SignInError::ExpirationTime)? <= now {
                return Err(SignInError::Expired);
            }
        }
        if let Some(n) = &self.not_before {
            if rfc3339(n).ok_or(SignInError::NotBefore)? > now {
                return Err(SignInError::NotYetValid);
            }
        }
        let nonce_ok = (8..=64).contains(&self.nonce.len())
            && self.nonce.bytes().all(|b| b.is_ascii_alphanumeric());
        if !nonce_ok {
            return Err(SignInError::Nonce);
        }
        let chain = self
            .chain_id
            .strip_prefix("eip155:")
            .and_then(|c| c.parse::<u64>().ok())
            .ok_or_else(|| SignInError::ChainId(self.chain_id.clone()))?;
        if self.chain_id != chain_id {
            return Err(SignInError::UnsupportedChain {
                expected: chain_id.to_string(),
                got: self.chain_id.clone(),
            });
        }
        let address = crate::address::parse_address(&self.address)
            .ok_or_else(|| SignInError::Malformed("address is not an address".into()))?;
        let message = self.message(chain, address)?;
        let nonce_until =
            (issued.unix_timestamp().max(0) as u64).saturating_add(MAX_AGE_SECS + CLOCK_SKEW_SECS);
        Ok(Checked {
            message,
            address,
            nonce_until,
        })
    }

    /// The EIP-4361 message these fields make, as the signer signed it.
    fn message(&self, chain_id: u64, address: Address) -> Result<siwe::Message, SignInError> {
        let bad =
            |what: &str| SignInError::Malformed(format!("{what} cannot be in a SIWE message"));
        let stamp = |s: &str| s.parse::<siwe::TimeStamp>().map_err(|_| bad("a time"));
        let uri = |s: &str| {
            s.parse::<iri_string::types::UriString>()
                .map_err(|_| bad("a URI"))
        };
        Ok(siwe::Message {
            domain: self.domain.parse().map_err(|_| bad("the domain"))?,
            address: address.into_array(),
            statement: self.statement.clone().filter(|s| !s.is_empty()),
            uri: uri(&self.uri)?,
            version: self.version.parse().map_err(|_| bad("the version"))?,
            chain_id,
            nonce: self.nonce.clone(),
            issued_at: stamp(&self.issued_at)?,
            expiration_time: self.expiration_time.as_deref().map(stamp).transpose()?,
            not_before: self.not_before.as_deref().map(stamp).transpose()?,
            request_id: self.request_id.clone(),
            resources: self
                .resources
                .iter()
                .flatten()
                .map(|r| uri(r))
                .collect::<Result<_, _>>()?,
        })
    }

    /// Who signed `checked`'s message: the address's own key (EIP-191), or only the chain can
    /// tell (a smart wallet's signature, EIP-1271).
    pub fn signer(&self, checked: &Checked) -> Result<Signer, SignInError> {
        let hex = self.signature.strip_prefix("0x").unwrap_or(&self.signature);
        let signature = hex::decode(hex).map_err(|_| SignInError::MalformedSignature)?;
        if let Ok(sig) = <[u8; 65]>::try_from(signature.as_slice()) {
            if checked.message.verify_eip191(&sig).is_ok() {
                return Ok(Signer::Key(checked.address));
            }
        }
        if signature.is_empty() {
            return Err(SignInError::MalformedSignature);
        }
        let hash = checked
            .message
            .eip191_hash()
            .map_err(|_| SignInError::Signature)?;
        Ok(Signer::AskChain {
            address: checked.address,
            hash: B256::from(hash),
            signature: signature.into(),
        })
    }
}

#[cfg(test)]
mod tests;
