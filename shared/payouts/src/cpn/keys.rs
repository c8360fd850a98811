//! Checking CPN's notification signatures: ECDSA P-256 over the raw body with the provider's
//! key, fetched by its UUID from the configured base URL (never a URL a request names), kept,
//! and asked again only for an id not seen or not asked for in the last minute.

use base64::Engine as _;
use p256::ecdsa::signature::Verifier as _;
use p256::ecdsa::{Signature, VerifyingKey};
use p256::pkcs8::DecodePublicKey as _;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The only algorithm CPN names for its notification keys.
pub const ALGORITHM: &str = "ECDSA_SHA_256";
/// Where a notification key is read, below the provider's base URL.
pub const PUBLIC_KEY_PATH: &str = "/v2/cpn/notifications/publicKey/";

/// `GET .../publicKey/{keyId}`'s answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PublicKeyAnswer {
    pub data: PublicKeyWire,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PublicKeyWire {
    pub id: String,
    pub algorithm: String,
    /// Base64 DER SubjectPublicKeyInfo.
    pub public_key: String,
}

/// Why an ECDSA-signed webhook is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("missing X-Circle-Signature or X-Circle-Key-Id header")]
    Missing,
    #[error("X-Circle-Key-Id must be a UUID")]
    KeyId,
    #[error("malformed X-Circle-Signature header")]
    Malformed,
    #[error("unknown signing key")]
    UnknownKey,
    #[error("signature does not match")]
    Mismatch,
    #[error("ECDSA-signed webhooks need [payout.cpn] base_url")]
    NotConfigured,
    /// The provider's key endpoint could not be read: the webhook should be sent again.
    #[error("the provider's notification key could not be read: {0}")]
    KeyUnavailable(String),
}

/// Whether `s` is a UUID in its canonical 36-character hyphenated form (what a key id must be
/// before it goes into a URL path).
pub fn is_uuid(s: &str) -> bool {
    s.len() == 36 && uuid::Uuid::try_parse(s).is_ok()
}

/// A public key from its base64 DER SubjectPublicKeyInfo.
pub fn decode_key(b64: &str) -> Option<VerifyingKey> {
    let der = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    VerifyingKey::from_public_key_der(&der).ok()
}

/// Checks a base64 signature (DER, or the 64-byte `r || s` form) of `body` under `key`.
pub fn verify_with(
    key: &VerifyingKey,
    signature_b64: &str,
    body: &[u8],
) -> Result<(), SignatureError> {
    if signature_b64.len() > 256 {
        return Err(SignatureError::Malformed);
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(signature_b64.trim())
        .map_err(|_| SignatureError::Malformed)?;
    let sig = Signature::from_der(&raw)
        .or_else(|_| Signature::from_slice(&raw))
        .map_err(|_| SignatureError::Malformed)?;
    key.verify(body, &sig).map_err(|_| SignatureError::Mismatch)
}

/// How long an unknown key id is not asked for again.
const MISS_PAUSE: Duration = Duration::from_secs(60);
/// The most key ids remembered (known or unknown); the oldest misses go first.
const MAX_REMEMBERED: usize = 1024;

/// The provider's notification keys, fetched by id from the configured base URL (never from a
/// URL a request names), kept, and fetched again only for an id not seen before or not asked
/// for in the last minute.
pub struct NotificationKeys {
    base: String,
    api_key: Option<String>,
    http: reqwest::Client,
    known: Mutex<HashMap<String, VerifyingKey>>,
    misses: Mutex<HashMap<String, Instant>>,
    fetches: std::sync::atomic::AtomicU64,
}

impl NotificationKeys {
    pub fn new(base: &str, api_key: Option<String>, timeout: Duration) -> Self {
        Self {
            base: base.trim_end_matches('/').to_string(),
            api_key,
            http: crate::provider::client(timeout),
            known: Mutex::default(),
            misses: Mutex::default(),
            fetches: Default::default(),
        }
    }

    /// How many times a key was asked of the provider.
    pub fn fetches(&self) -> u64 {
        self.fetches.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn cached(&self, id: &str) -> Option<VerifyingKey> {
        self.known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .copied()
    }

    /// Checks the headers' signature over `body`.
    pub async fn verify(
        &self,
        key_id: Option<&str>,
        signature: Option<&str>,
        body: &[u8],
    ) -> Result<(), SignatureError> {
        let (Some(key_id), Some(signature)) = (key_id, signature) else {
            return Err(SignatureError::Missing);
        };
        let key_id = key_id.trim().to_ascii_lowercase();
        if !is_uuid(&key_id) {
            return Err(SignatureError::KeyId);
        }
        let key = match self.cached(&key_id) {
            Some(k) => k,
            None => self.fetch(&key_id).await?,
        };
        verify_with(&key, signature, body)
    }

    async fn fetch(&self, key_id: &str) -> Result<VerifyingKey, SignatureError> {
        {
            let mut misses = self.misses.lock().unwrap_or_else(|e| e.into_inner());
            if misses.get(key_id).is_some_and(|t| t.elapsed() < MISS_PAUSE) {
                return Err(SignatureError::UnknownKey);
            }
            if misses.len() >= MAX_REMEMBERED {
                misses.retain(|_, t| t.elapsed() < MISS_PAUSE);
            }
            if misses.len() >= MAX_REMEMBERED {
                return Err(SignatureError::UnknownKey);
            }
            misses.insert(key_id.to_string(), Instant::now());
        }
        self.fetches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut rb = self
            .http
            .get(format!("{}{PUBLIC_KEY_PATH}{key_id}", self.base))
            .header("accept", "application/json");
        if let Some(k) = &self.api_key {
            rb = rb.bearer_auth(k);
        }
        let unavailable = |e: String| {
            // Not the key's fault: let the next delivery ask again.
            self.misses
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(key_id);
            SignatureError::KeyUnavailable(e)
        };
        let resp = rb.send().await.map_err(|e| unavailable(e.to_string()))?;
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_FOUND || status == reqwest::StatusCode::BAD_REQUEST {
            return Err(SignatureError::UnknownKey);
        }
        if !status.is_success() {
            return Err(unavailable(format!("HTTP {}", status.as_u16())));
        }
        let body = resp.bytes().await.map_err(|e| unavailable(e.to_string()))?;
        let answer: PublicKeyAnswer = serde_json::from_slice(&body)
            .map_err(|e| unavailable(format!("unreadable key answer: {e}")))?;
        if !answer.data.id.eq_ignore_ascii_case(key_id) || answer.data.algorithm != ALGORITHM {
            return Err(SignatureError::UnknownKey);
        }
        let key = decode_key(&answer.data.public_key).ok_or(SignatureError::UnknownKey)?;
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if known.len() >= MAX_REMEMBERED {
            known.clear();
        }
        known.insert(key_id.to_string(), key);
        self.misses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key_id);
        Ok(key)
    }
}
