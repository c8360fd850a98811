//! The seller's web console at `/console` (issue 19): one page, a script and a stylesheet,
//! written here and compiled into the binary (`include_str!`), so nothing is needed at run
//! time. The page keeps the organisation's API key (and, on the operator view, the admin token)
//! in `sessionStorage` and sends it as a bearer token to the same APIs everyone uses; it never
//! puts a key in a URL, so no key reaches a log. No cookie is involved, so there is nothing for
//! a cross-site request to ride on; a strict Content-Security-Policy (no inline script, no other
//! origin) keeps injected markup from running, and the script writes data only as text.
//! `/api/org` is the organisation's own record, which the console needs (its slug).

use crate::auth::OrgAuth;
use crate::views::OrgView;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Json;

const INDEX: &str = include_str!("../console/index.html");
const SCRIPT: &str = include_str!("../console/app.js");
const STYLE: &str = include_str!("../console/app.css");

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// `GET /console`: the page.
pub async fn index() -> Response {
    asset(INDEX, "text/html; charset=utf-8")
}

/// `GET /console/` -> `/console`.
pub async fn slash() -> Redirect {
    Redirect::permanent("/console")
}

/// `GET /console/app.js`.
pub async fn script() -> Response {
    asset(SCRIPT, "text/javascript; charset=utf-8")
}

/// `GET /console/app.css`.
pub async fn style() -> Response {
    asset(STYLE, "text/css; charset=utf-8")
}

#[utoipa::path(get, path = "/api/org", tag = "management", security(("orgKey" = [])), responses((status = 200, description = "The calling key's organisation (never its sealed payer key)", body = OrgView)))]
pub async fn org(OrgAuth { org, .. }: OrgAuth) -> Json<OrgView> {
    Json(OrgView::from(&org))
}
