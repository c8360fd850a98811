//! The OpenAPI 3.1 description of the control plane, served at `/openapi.json`.
//!
//! Operations are declared with `#[utoipa::path]` on the handlers themselves, with the shapes in
//! `schema.rs`; this module lists them. Error answers are the same everywhere
//! ([`paygate_domain::ErrorBody`]); [`CommonErrors`] adds the ones every operation can give
//! (malformed request, missing credentials, oversized body, internal error) so the annotations
//! list only what is particular to each operation.

use paygate_domain::ErrorBody;
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{RefOr, Response, ResponseBuilder};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "paygate control plane",
        description = "Management, admin, discovery, metrics, facilitator, corridor and MCP \
                       endpoints. Paid routes under /gateway/{orgSlug}/... are described by \
                       their x402 402 answers, not here."
    ),
    paths(
        crate::meta::health,
        crate::routes_api::create,
        crate::routes_api::list,
        crate::routes_api::get_one,
        crate::routes_api::update,
        crate::routes_api::delete,
        crate::origin_api::get,
        crate::origin_api::rotate,
        crate::admin::create_org,
        crate::admin::list_orgs,
        crate::admin::get_org,
        crate::admin::update_org,
        crate::admin::put_payer_wallet,
        crate::admin::delete_payer_wallet,
        crate::admin::create_key,
        crate::admin::list_keys,
        crate::admin::revoke_key,
        crate::console::org,
        crate::keys_api::list,
        crate::keys_api::create,
        crate::keys_api::delete,
        crate::channels_api::list,
        crate::windows_api::access_windows,
        crate::audit::audit_log,
        crate::webhooks_api::create,
        crate::webhooks_api::list,
        crate::webhooks_api::delete,
        crate::webhooks_api::rotate,
        crate::webhooks_api::deliveries,
        crate::webhooks_api::replay,
        crate::corridors::payout_wallet,
        crate::channels_api::claim,
        crate::channels_api::get_one,
        crate::channels_api::refund,
        crate::payments_api::list,
        crate::payments_api::get_one,
        crate::payments_api::audit,
        crate::refunds_api::refund,
        crate::receipts_api::receipt,
        crate::receipts_api::did_document,
        crate::discovery::list,
        crate::discovery::well_known,
        crate::mpp_discovery::openapi,
        crate::metrics_api::org_metrics,
        crate::revenue::usage,
        crate::metrics_api::prometheus,
        crate::facilitator_api::verify,
        crate::facilitator_api::settle,
        crate::facilitator_api::supported,
        crate::corridors::create,
        crate::corridor_lists::list,
        crate::corridor_lists::payouts,
        crate::corridors::get_one,
        crate::corridors::quote,
        crate::corridors::pay,
        crate::corridors::get_payment,
        crate::corridors::answer_rfi,
        crate::corridors::refresh,
        crate::corridors::webhook,
        crate::corridors::approve_kyc,
        crate::mcp::sse::open_stream,
        crate::mcp::sse::post_message,
        mcp_streamable,
        mcp_stream,
        mcp_close,
        openapi_json,
    ),
    modifiers(&CommonErrors),
)]
pub struct ApiDoc;

/// `GET /openapi.json`: this description.
#[utoipa::path(get, path = "/openapi.json", tag = "meta",
    responses((status = 200, description = "The OpenAPI 3.1 description", body = Object)))]
pub async fn openapi_json(
    axum::extract::State(state): axum::extract::State<crate::state::AppState>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    static DOC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let doc = DOC.get_or_init(|| {
        let mut doc = ApiDoc::openapi();
        // Where this deployment answers: generated clients default to it.
        doc.servers = Some(vec![utoipa::openapi::server::Server::new(
            state.config.server.public_base_url(),
        )]);
        let mut v = serde_json::to_value(&doc).unwrap_or_default();
        merge_described_fields(&mut v);
        v.to_string()
    });
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        doc.as_str(),
    )
        .into_response()
}

/// `POST /mcp`: MCP's streamable HTTP transport (rmcp's service; described, not handled, here).
#[utoipa::path(post, path = "/mcp", tag = "mcp", security(("orgKey" = [])),
    params(("Mcp-Session-Id" = Option<String>, Header, description = "From the initialize answer")),
    request_body(content = Object, description = "A JSON-RPC 2.0 message (MCP)"),
    responses(
        (status = 200, description = "JSON-RPC answer, as JSON or as an event stream",
            content((Object = "application/json"), (String = "text/event-stream"))),
        (status = 202, description = "A notification or response, accepted"),
        (status = 404, description = "Unknown MCP session", body = ErrorBody),
        (status = 406, description = "Accept must allow application/json and text/event-stream", body = ErrorBody),
        (status = 415, description = "Content-Type must be application/json", body = ErrorBody),
    ))]
/// A carrier for an operation rmcp serves (utoipa attaches operations to functions).
pub fn mcp_streamable() {}

/// `GET /mcp`: the session's server-to-client event stream (rmcp).
#[utoipa::path(get, path = "/mcp", tag = "mcp", security(("orgKey" = [])),
    params(("Mcp-Session-Id" = String, Header)),
    responses(
        (status = 200, description = "Event stream of server messages", content_type = "text/event-stream", body = String),
        (status = 404, description = "Unknown MCP session", body = ErrorBody),
        (status = 406, description = "Accept must allow text/event-stream", body = ErrorBody),
    ))]
/// A carrier for an operation rmcp serves (utoipa attaches operations to functions).
pub fn mcp_stream() {}

/// `DELETE /mcp`: ends an MCP session (rmcp).
#[utoipa::path(delete, path = "/mcp", tag = "mcp", security(("orgKey" = [])),
    params(("Mcp-Session-Id" = String, Header)),
    responses(
        (status = 202, description = "Session closed"),
        (status = 404, description = "Unknown MCP session", body = ErrorBody),
    ))]
/// A carrier for an operation rmcp serves (utoipa attaches operations to functions).
pub fn mcp_close() {}

/// Adds the security schemes and the error answers every operation can give.
pub struct CommonErrors;

fn error_response(description: &str) -> RefOr<Response> {
    RefOr::T(
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                utoipa::openapi::ContentBuilder::new()
                    .schema(Some(utoipa::openapi::Ref::from_schema_name("Error")))
                    .build(),
            )
            .build(),
    )
}

fn add_error(op: &mut Operation, status: &str, description: &str) {
    op.responses
        .responses
        .entry(status.to_string())
        .or_insert_with(|| error_response(description));
}

impl Modify for CommonErrors {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        let bearer = |what: &str| {
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(what.to_string()))
                    .build(),
            )
        };
        components.add_security_scheme(
            "orgKey",
            bearer("An organisation's API key: Authorization: Bearer pgk_..."),
        );
        components.add_security_scheme(
            "adminToken",
            bearer("The operator's admin token (from the environment)"),
        );
        unique_operation_ids(doc);
        each_operation(doc, &mut |op| {
            add_error(
                op,
                "400",
                "Malformed request: query, header or JSON body (see `details`)",
            );
            if op.security.as_ref().is_some_and(|s| !s.is_empty()) {
                add_error(op, "401", "Missing, invalid or revoked credentials");
            }
            if op.request_body.is_some() {
                add_error(op, "413", "Body larger than `server.max_body_bytes`");
            }
            add_error(
                op,
                "500",
                "Internal error (never expected; quote the requestId)",
            );
        });
    }
}

/// utoipa gives a documented field of an inlined type `allOf: [<the type>, {type: object,
/// description}]`, which says the field is an object as well (client generators then build an
/// object for a string). Each such pair becomes the type with the description.
fn merge_described_fields(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            let pair = map
                .get("allOf")
                .and_then(Value::as_array)
                .filter(|a| a.len() == 2)
                .and_then(|a| {
                    let extra = a[1].as_object()?;
                    let only_description = extra.get("type") == Some(&Value::from("object"))
                        && extra.keys().all(|k| k == "type" || k == "description");
                    only_description.then(|| (a[0].clone(), extra.get("description").cloned()))
                });
            if let Some((mut base, description)) = pair {
                if let (Some(b), Some(d)) = (base.as_object_mut(), description) {
                    if !b.contains_key("$ref") {
                        b.insert("description".into(), d);
                    }
                }
                map.remove("allOf");
                if let Value::Object(b) = base {
                    for (k, val) in b {
                        map.entry(k).or_insert(val);
                    }
                }
            }
            map.values_mut().for_each(merge_described_fields);
        }
        Value::Array(items) => items.iter_mut().for_each(merge_described_fields),
        _ => {}
    }
}

/// Runs `f` on every operation of the document.
fn each_operation(doc: &mut utoipa::openapi::OpenApi, f: &mut dyn FnMut(&mut Operation)) {
    for item in doc.paths.paths.values_mut() {
        let ops = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ];
        ops.into_iter().flatten().for_each(&mut *f);
    }
}

/// Operation ids from handler names repeat across modules (`list`, `create`, `get_one`):
/// each repeated one gets its tag in front (`routes_list`, `corridors_list`), so client
/// generators see every operation under its own name.
fn unique_operation_ids(doc: &mut utoipa::openapi::OpenApi) {
    let mut seen = std::collections::HashMap::<String, usize>::new();
    each_operation(doc, &mut |op| {
        if let Some(id) = &op.operation_id {
            *seen.entry(id.clone()).or_default() += 1;
        }
    });
    each_operation(doc, &mut |op| {
        let Some(id) = op.operation_id.clone() else {
            return;
        };
        if seen.get(&id).is_some_and(|n| *n > 1) {
            let tag = op
                .tags
                .as_ref()
                .and_then(|t| t.first())
                .cloned()
                .unwrap_or_default();
            op.operation_id = Some(format!("{tag}_{id}"));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_is_openapi_3_1_with_both_security_schemes() {
        let v: serde_json::Value =
            serde_json::from_str(&ApiDoc::openapi().to_json().unwrap()).unwrap();
        assert_eq!(v["openapi"], "3.1.0");
        let schemes = &v["components"]["securitySchemes"];
        assert_eq!(schemes["orgKey"]["scheme"], "bearer");
        assert_eq!(schemes["adminToken"]["scheme"], "bearer");
        // A secured operation names its scheme and documents 401 with the error body.
        let create = &v["paths"]["/api/routes"]["post"];
        assert_eq!(create["security"][0]["orgKey"], serde_json::json!([]));
        assert_eq!(
            create["responses"]["401"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/Error"
        );
        assert_eq!(create["operationId"], "routes_create");
        // A nullable money field is a number, a string or null (not an object).
        let cap = &v["components"]["schemas"]["OrgUpdate"]["properties"]["mcpDailyCapUSD"];
        assert!(!cap.to_string().contains("\"object\""), "{cap}");
        // Payout statuses are the ones the API answers.
        let status = &v["components"]["schemas"]["PayoutStatusName"]["enum"];
        assert_eq!(
            status,
            &serde_json::json!(["PENDING", "COMPLIANCE_HOLD", "SETTLED", "FAILED"]),
            "{}",
            v["components"]["schemas"]["Payout"]
        );
        // Every operation id is unique (client generators name methods after them).
        let mut ids = std::collections::HashSet::new();
        for item in v["paths"].as_object().unwrap().values() {
            for op in item.as_object().unwrap().values() {
                if let Some(id) = op.get("operationId").and_then(|i| i.as_str()) {
                    assert!(ids.insert(id.to_string()), "duplicate operationId {id}");
                }
            }
        }
    }
}
