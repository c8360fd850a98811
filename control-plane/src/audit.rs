//! The audit log (issue 32, item 5): each management handler records its change here once it
//! is made (`record`), with who made it, the object before and after, and where the request
//! came from; `GET /api/audit` lists an organisation's entries newest first. A failure to record
//! is an ERROR for the operator (the change itself stands: it was made before).

use crate::auth::OrgAuth;
use crate::error::ApiError;
use crate::input::{next_cursor, TypedQuery};
use crate::state::AppState;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::Json;
use paygate_domain::audit::AuditEntry;
use paygate_domain::FieldProblem;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// Where a request came from: the client address the gateway saw (the last `X-Forwarded-For`
/// entry, which the proxy appends) and its request id.
pub struct Caller {
    from: Option<String>,
    request_id: Option<String>,
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let header = |name: &str| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let from = header("x-forwarded-for")
            .and_then(|v| v.rsplit(',').next().map(|s| s.trim().to_string()))
            .filter(|s| !s.is_empty());
        Ok(Self {
            from,
            request_id: header("x-request-id"),
        })
    }
}

/// Who made a change: an organisation's key, or the operator.
pub enum Actor<'a> {
    Key(&'a OrgAuth),
    Admin,
}

impl Actor<'_> {
    fn name(&self) -> String {
        match self {
            Self::Key(auth) => format!("key:{}", auth.key_id),
            Self::Admin => "admin".into(),
        }
    }
}

/// A change to record: on `org_id`, `action` (`object.verb`) of `target`, the object's JSON
/// `before` and `after` it.
pub struct Change<'a> {
    pub org_id: &'a str,
    pub action: &'a str,
    pub target: &'a str,
    pub before: Option<serde_json::Value>,
    pub after: Option<serde_json::Value>,
}

impl<'a> Change<'a> {
    /// A change with nothing recorded before it (a creation, an action on an object).
    pub fn created(
        org_id: &'a str,
        action: &'a str,
        target: &'a str,
        after: Option<serde_json::Value>,
    ) -> Self {
        Self {
            org_id,
            action,
            target,
            before: None,
            after,
        }
    }
}

/// The JSON of `v` for an entry's before/after.
pub fn json_of<T: Serialize>(v: &T) -> Option<serde_json::Value> {
    serde_json::to_value(v).ok()
}

/// Records `change`, made by `actor` for the request `caller` came with.
pub async fn record(state: &AppState, actor: Actor<'_>, caller: &Caller, change: Change<'_>) {
    let entry = AuditEntry {
        id: paygate_domain::ids::new_id("aud"),
        org_id: change.org_id.to_string(),
        actor: actor.name(),
        action: change.action.to_string(),
        target: change.target.to_string(),
        before: change.before,
        after: change.after,
        from: caller.from.clone(),
        request_id: caller.request_id.clone(),
        at: paygate_domain::now_rfc3339(),
    };
    if let Err(e) = state.store.append_audit(&entry).await {
        tracing::error!(error = %e, action = %entry.action, target = %entry.target, "audit entry not recorded");
    }
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Page size: 1 to 500 (default 50).
    limit: Option<u32>,
    /// `nextCursor` of the previous page.
    cursor: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditPage {
    entries: Vec<AuditEntry>,
    #[schema(required)]
    next_cursor: Option<String>,
}

#[utoipa::path(get, path = "/api/audit", tag = "keys", security(("orgKey" = [])), params(AuditQuery), responses((status = 200, description = "The organisation's audit log, newest first", body = AuditPage), (status = 400, description = "A bad limit or cursor", body = paygate_domain::ErrorBody)))]
pub async fn audit_log(
    State(state): State<AppState>,
    auth: OrgAuth,
    TypedQuery(q): TypedQuery<AuditQuery>,
) -> Result<Json<AuditPage>, ApiError> {
    let limit = q.limit.unwrap_or(50);
    let mut problems = Vec::new();
    if !(1..=500).contains(&limit) {
        problems.push(FieldProblem::new("limit", "must be 1 to 500"));
    }
    let cursor = q.cursor.filter(|c| !c.is_empty());
    if cursor
        .as_ref()
        .is_some_and(|c| !c.starts_with("aud_") || c.len() > 64)
    {
        problems.push(FieldProblem::new(
            "cursor",
            "must be a nextCursor this API gave",
        ));
    }
    if !problems.is_empty() {
        return Err(ApiError::validation(problems));
    }
    let entries = state
        .store
        .list_audit(&auth.org.id, cursor.as_deref(), limit as usize)
        .await?;
    let next = next_cursor(&entries, limit as usize, |e| e.id.as_str());
    Ok(Json(AuditPage {
        entries,
        next_cursor: next,
    }))
}
