//! Extractors for the two kinds of caller: an organisation (API key) and the operator (admin
//! token). Both compare in constant time; a revoked key fails on its next request.

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use paygate_domain::apikey;
use paygate_domain::model::{KeyRole, Org};
use paygate_domain::ErrorCode;

/// The organisation an API key belongs to, for a key whose role allows the endpoint (what each
/// endpoint needs: `scopes.rs`).
pub struct OrgAuth {
    pub org: Org,
    /// The key's id (the audit log's actor).
    pub key_id: String,
}

fn bearer(parts: &Parts) -> Option<&str> {
    let v = parts.headers.get(axum::http::header::AUTHORIZATION)?;
    let s = v.to_str().ok()?;
    let (scheme, token) = s.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

fn unauthorized(msg: &str) -> ApiError {
    ApiError::new(ErrorCode::Unauthorized, msg)
}

impl FromRequestParts<AppState> for OrgAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = bearer(parts)
            .ok_or_else(|| unauthorized("missing API key: send Authorization: Bearer <API_KEY>"))?;
        let invalid = || unauthorized("invalid or revoked API key");
        let (key_id, secret) = apikey::parse(token).ok_or_else(invalid)?;
        let rec = state.store.get_api_key(key_id).await?.ok_or_else(invalid)?;
        let matches = apikey::secret_matches(secret, &rec.secret_sha256);
        if !matches || rec.revoked_at.is_some() {
            return Err(invalid());
        }
        if let Some(end) = &rec.expires_at {
            let ends =
                time::OffsetDateTime::parse(end, &time::format_description::well_known::Rfc3339);
            // An end that does not read as a time (never written so) counts as passed.
            if ends.map_or(true, |t| time::OffsetDateTime::now_utc() >= t) {
                return Err(unauthorized(&format!("this API key expired at {end}")));
            }
        }
        let path = parts
            .extensions
            .get::<axum::extract::MatchedPath>()
            .map_or_else(|| parts.uri.path().to_string(), |m| m.as_str().to_string());
        let need = crate::scopes::need(&parts.method, &path);
        if !rec.role.allows(need) {
            let or_full = if need == KeyRole::Full {
                ""
            } else {
                " or full"
            };
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                format!(
                    "this API key's role is {}: {} {} needs a key with role {}{or_full}",
                    rec.role.as_str(),
                    parts.method,
                    parts.uri.path(),
                    need.as_str()
                ),
            ));
        }
        let org = state
            .store
            .get_org(&rec.org_id)
            .await?
            .ok_or_else(invalid)?;
        Ok(Self {
            org,
            key_id: rec.key_id,
        })
    }
}

impl OrgAuth {
    /// The organisation, unless it is suspended (`403 ORG_SUSPENDED`): for what moves money or
    /// sells on its behalf (corridor quotes and payouts, the facilitator API). Reading and fixing
    /// its configuration stay open to a suspended organisation.
    pub fn active(self) -> Result<Org, ApiError> {
        self.ensure_active()?;
        Ok(self.org)
    }

    /// [`Self::active`] without giving the organisation up.
    pub fn ensure_active(&self) -> Result<(), ApiError> {
        if self.org.suspended {
            return Err(ApiError::new(
                ErrorCode::OrgSuspended,
                "this organisation is suspended",
            ));
        }
        Ok(())
    }
}

/// A Prometheus scraper: the scrape token (`metrics.scrape_token_env`) or the admin token.
pub struct ScrapeAuth;

impl FromRequestParts<AppState> for ScrapeAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = bearer(parts).ok_or_else(|| {
            unauthorized("missing scrape token: send Authorization: Bearer <metrics scrape token>")
        })?;
        let scrape = std::env::var(&state.config.metrics.scrape_token_env)
            .ok()
            .filter(|t| !t.is_empty());
        let accepted = [scrape.as_deref(), state.admin_token.as_deref()]
            .into_iter()
            .flatten()
            .any(|expected| apikey::tokens_equal(token, expected));
        if accepted {
            Ok(Self)
        } else {
            Err(unauthorized("invalid scrape token"))
        }
    }
}

/// The operator, proven by the admin token.
pub struct AdminAuth;

impl FromRequestParts<AppState> for AdminAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Some(expected) = state.admin_token.as_deref() else {
            return Err(unauthorized(
                "admin API disabled: the admin token environment variable is not set",
            ));
        };
        let token = bearer(parts).ok_or_else(|| unauthorized("missing admin token"))?;
        if apikey::tokens_equal(token, expected) {
            Ok(Self)
        } else {
            Err(unauthorized("invalid admin token"))
        }
    }
}
