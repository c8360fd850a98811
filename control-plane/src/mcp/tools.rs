//! Routes as MCP tools: names valid for every MCP client (`[a-zA-Z0-9_-]`, at most 64
//! characters, unique within the organisation), the route's description, and one input schema.

use paygate_gateway::route_table::{OrgRoutes, RouteEntry};
use rmcp::model::{JsonObject, Tool};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, LazyLock};

/// The longest tool name MCP clients accept.
pub const MAX_NAME: usize = 64;
/// Hex digits of the path's hash appended when two paths sanitise to the same name.
const HASH_LEN: usize = 8;

/// The name a path sanitises to: separators and other characters become one `_`.
fn base_name(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
    }
    let trimmed = out.trim_end_matches('_');
    let mut name = if trimmed.is_empty() {
        "root".to_string()
    } else {
        trimmed.to_string()
    };
    name.truncate(MAX_NAME);
    name
}

fn path_hash(path: &str, len: usize) -> String {
    let h = hex::encode(Sha256::digest(path.as_bytes()));
    h[..len].to_string()
}

fn with_suffix(base: &str, suffix: &str) -> String {
    let keep = MAX_NAME - suffix.len() - 1;
    let mut b = base.to_string();
    b.truncate(keep);
    format!("{b}_{suffix}")
}

/// The organisation's active routes under their tool names, sorted by name. Paths that
/// sanitise alike all get a suffix from their path's hash, so a name never depends on which
/// route was created first.
pub fn named(org: &OrgRoutes) -> Vec<(String, Arc<RouteEntry>)> {
    let mut groups: BTreeMap<String, Vec<&Arc<RouteEntry>>> = BTreeMap::new();
    for entry in org.routes.values() {
        groups
            .entry(base_name(&entry.route.path))
            .or_default()
            .push(entry);
    }
    let mut out = Vec::with_capacity(org.routes.len());
    let mut taken: HashSet<String> = groups
        .iter()
        .filter(|(_, g)| g.len() == 1)
        .map(|(n, _)| n.clone())
        .collect();
    for (base, group) in groups {
        if let [only] = group.as_slice() {
            out.push((base, Arc::clone(only)));
            continue;
        }
        for entry in group {
            let path = &entry.route.path;
            let mut name = with_suffix(&base, &path_hash(path, HASH_LEN));
            if taken.contains(&name) {
                // A literal path already looks like a suffixed one: use more of the hash.
                name = with_suffix(&base, &path_hash(path, 2 * HASH_LEN));
            }
            taken.insert(name.clone());
            out.push((name, Arc::clone(entry)));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The methods a tool call may use, as the input schema lists them.
pub const TOOL_METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

static INPUT_SCHEMA: LazyLock<Arc<JsonObject>> = LazyLock::new(|| {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "method": {
                "type": "string",
                "enum": TOOL_METHODS,
                "description": "HTTP method; GET by default, POST when a body is given"
            },
            "query": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "Query string parameters"
            },
            "body": {
                "description": "Request body: sent as JSON (a string is sent as plain text)"
            }
        },
        "additionalProperties": false
    });
    match schema {
        serde_json::Value::Object(m) => Arc::new(m),
        _ => Arc::new(JsonObject::new()),
    }
});

/// What a successful call returns as `structuredContent` (and, serialised, as text): the API's
/// status, its content type and its body (parsed JSON, or the text).
static OUTPUT_SCHEMA: LazyLock<Arc<JsonObject>> = LazyLock::new(|| {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "status": {"type": "integer", "description": "The API's HTTP status"},
            "contentType": {"type": "string", "description": "The API's Content-Type"},
            "body": {"description": "The API's answer: JSON as JSON, anything else as text"},
            "truncated": {"type": "boolean", "description": "The answer was cut at the result limit"}
        },
        "required": ["status", "body"]
    });
    match schema {
        serde_json::Value::Object(m) => Arc::new(m),
        _ => Arc::new(JsonObject::new()),
    }
});

/// `base` with its `body` property replaced by the route's own schema, when it has one.
fn with_body(base: &Arc<JsonObject>, body: Option<&serde_json::Value>) -> Arc<JsonObject> {
    let Some(body) = body else {
        return base.clone();
    };
    let mut schema = (**base).clone();
    if let Some(serde_json::Value::Object(props)) = schema.get_mut("properties") {
        props.insert("body".into(), body.clone());
    }
    Arc::new(schema)
}

/// The tool an entry is advertised as: each call pays the route's price, so it is neither
/// read-only nor idempotent, and it reaches an API outside paygate (open world). The route's
/// `inputSchema` / `outputSchema`, when set, describe the call's `body` and the result's.
pub fn tool(name: &str, entry: &RouteEntry, description: String) -> Tool {
    let r = &entry.route;
    let input = with_body(&INPUT_SCHEMA, r.input_schema.as_ref());
    let mut t = Tool::new(name.to_string(), description, input);
    t.title = Some(r.path.clone());
    t.output_schema = Some(with_body(&OUTPUT_SCHEMA, r.output_schema.as_ref()));
    let mut hints = rmcp::model::ToolAnnotations::default();
    hints.title = Some(r.path.clone());
    hints.read_only_hint = Some(false);
    hints.destructive_hint = Some(false);
    hints.idempotent_hint = Some(false);
    hints.open_world_hint = Some(true);
    t.annotations = Some(hints);
    t
}

/// Every tool of the organisation (paid from its own wallet), sorted by name.
pub fn list(org: &OrgRoutes) -> Vec<Tool> {
    named(org)
        .iter()
        .map(|(n, e)| {
            let r = &e.route;
            let description = if r.description.is_empty() {
                format!("Paid API {} (${} per call)", r.path, r.price.to_decimal())
            } else {
                r.description.clone()
            };
            tool(n, e, description)
        })
        .collect()
}

/// The organisation's public tools (routes marked `publicTool` that can be paid), each
/// saying its price: the caller pays it.
pub fn public(org: &OrgRoutes) -> Vec<(String, Arc<RouteEntry>)> {
    named(org)
        .into_iter()
        .filter(|(_, e)| {
            // Paid in x402 (and MPP where offered): a route answering MPP alone is not listed.
            let x402 = e
                .route
                .protocols
                .contains(&paygate_domain::model::PaymentProtocol::X402);
            e.route.public_tool && e.payment.is_some() && x402
        })
        .collect()
}

/// A public tool as listed: its description ends with its price and network.
pub fn public_tool(name: &str, entry: &RouteEntry) -> Tool {
    let r = &entry.route;
    let network = entry
        .payment
        .as_ref()
        .map(|(req, _)| req.network.caip2.clone())
        .unwrap_or_default();
    let what = if r.description.is_empty() {
        format!("Paid API {}", r.path)
    } else {
        r.description.clone()
    };
    let description = format!(
        "{what} (${} per call in USDC on {network}, paid by the caller with x402 or MPP)",
        r.price.to_decimal()
    );
    let mut t = tool(name, entry, description);
    // No output schema: an unpaid call's result carries x402's payment requirements as its
    // structured content, which MCP clients check against a declared output schema even on an
    // error (the official TypeScript SDK does, and refuses the result).
    t.output_schema = None;
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitised_and_bounded() {
        assert_eq!(base_name("/weather/current"), "weather_current");
        assert_eq!(base_name("/v1/chat.completions"), "v1_chat_completions");
        assert_eq!(base_name("/a//b/"), "a_b");
        assert_eq!(base_name("/"), "root");
        assert_eq!(base_name("/ünïcode/ok"), "n_code_ok");
        assert_eq!(
            base_name("/keep-dash_and_underscore"),
            "keep-dash_and_underscore"
        );
        let long = format!("/{}", "x".repeat(200));
        assert_eq!(base_name(&long).len(), MAX_NAME);
        let suffixed = with_suffix(&"y".repeat(64), "0123abcd");
        assert_eq!(suffixed.len(), MAX_NAME);
        assert!(suffixed.ends_with("_0123abcd"));
    }

    #[test]
    fn schema_is_an_object_with_the_three_inputs() {
        let s = INPUT_SCHEMA.clone();
        assert_eq!(s["type"], "object");
        let props = s["properties"].as_object().unwrap();
        assert!(props.contains_key("query") && props.contains_key("body"));
        assert!(props.contains_key("method"));
    }
}
