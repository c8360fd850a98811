//! The x402 "bazaar" discovery extension of a route or public MCP tool: `{info, schema}`, where
//! `info` says how to call it and `schema` is a JSON Schema that `info` satisfies (what a
//! facilitator's catalogue checks). Carried in the route's v2 challenge (`extensions.bazaar`)
//! and in each discovery item.
//!
//! A route with an `inputSchema` is described as a JSON-body call (`POST`, `bodyType: json`,
//! the schema as `body`'s); without one, as a `GET`. An `outputSchema` becomes the schema of
//! `output.example`. `info.input.body` is an example body, which catalogues check against the
//! schema: the schema's own first `examples` entry when it has one, else the smallest document
//! the schema accepts (each required property at its type's plainest value), kept only if the
//! schema accepts it.

use paygate_domain::model::Route;
use serde_json::{json, Value};

const SCHEMA_DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

/// `info.output` and its schema, when the answer's schema is known.
fn output(output_schema: Option<&Value>) -> Option<(Value, Value)> {
    output_schema.map(|s| {
        (
            json!({"type": "json"}),
            json!({
                "type": "object",
                "properties": {"type": {"type": "string"}, "example": s},
                "required": ["type"]
            }),
        )
    })
}

fn extension(input: Value, input_schema: Value, out: Option<(Value, Value)>) -> Value {
    let mut info = json!({ "input": input });
    let mut properties = json!({ "input": input_schema });
    if let Some((o, s)) = out {
        info["output"] = o;
        properties["output"] = s;
    }
    json!({
        "info": info,
        "schema": {
            "$schema": SCHEMA_DIALECT,
            "type": "object",
            "properties": properties,
            "required": ["input"]
        }
    })
}

/// The plainest document of `schema`'s shape (not checked here).
fn plainest(schema: &Value, depth: u8) -> Value {
    let pick = |k: &str| schema.get(k).cloned();
    if let Some(v) = pick("const").or_else(|| pick("default")) {
        return v;
    }
    if let Some(v) = schema
        .get("examples")
        .or_else(|| schema.get("enum"))
        .and_then(|e| e.get(0))
    {
        return v.clone();
    }
    let kind = match schema.get("type") {
        Some(Value::Array(kinds)) => kinds.first().and_then(Value::as_str),
        Some(Value::String(k)) => Some(k.as_str()),
        _ if schema.get("properties").is_some() => Some("object"),
        _ => None,
    };
    match kind {
        Some("string") => json!(""),
        Some("integer") | Some("number") => json!(0),
        Some("boolean") => json!(false),
        Some("array") => json!([]),
        Some("null") => Value::Null,
        _ => {
            let mut doc = serde_json::Map::new();
            let required = schema.get("required").and_then(Value::as_array);
            for name in required.into_iter().flatten().filter_map(Value::as_str) {
                let prop = schema
                    .get("properties")
                    .and_then(|p| p.get(name))
                    .unwrap_or(&Value::Null);
                let v = if depth > 8 {
                    Value::Null
                } else {
                    plainest(prop, depth + 1)
                };
                doc.insert(name.to_string(), v);
            }
            Value::Object(doc)
        }
    }
}

/// An example body `schema` accepts, if one is found.
fn example_of(schema: &Value) -> Option<Value> {
    let example = plainest(schema, 0);
    let validator = jsonschema::validator_for(schema).ok()?;
    validator.is_valid(&example).then_some(example)
}

/// The bazaar extension of an HTTP route.
pub fn http(route: &Route) -> Value {
    let out = output(route.output_schema.as_ref());
    match &route.input_schema {
        Some(body) => extension(
            {
                let mut input = json!({"type": "http", "method": "POST", "bodyType": "json"});
                if let Some(example) = example_of(body) {
                    input["body"] = example;
                }
                input
            },
            json!({
                "type": "object",
                "properties": {
                    "type": {"type": "string", "const": "http"},
                    "method": {"type": "string", "enum": ["POST", "PUT", "PATCH"]},
                    "bodyType": {"type": "string", "enum": ["json"]},
                    "body": body
                },
                "required": ["type", "method", "bodyType"],
                "additionalProperties": false
            }),
            out,
        ),
        None => extension(
            json!({"type": "http", "method": "GET"}),
            json!({
                "type": "object",
                "properties": {
                    "type": {"type": "string", "const": "http"},
                    "method": {"type": "string", "enum": ["GET", "HEAD", "DELETE"]}
                },
                "required": ["type", "method"],
                "additionalProperties": false
            }),
            out,
        ),
    }
}

/// The bazaar extension of a public MCP tool (`transport: streamable-http`).
pub fn mcp(
    tool_name: &str,
    description: &str,
    input_schema: &Value,
    output_schema: Option<&Value>,
) -> Value {
    extension(
        json!({
            "type": "mcp", "toolName": tool_name, "description": description,
            "transport": "streamable-http", "inputSchema": input_schema,
        }),
        json!({
            "type": "object",
            "properties": {
                "type": {"type": "string", "const": "mcp"},
                "toolName": {"type": "string"},
                "description": {"type": "string"},
                "transport": {"type": "string", "enum": ["streamable-http", "sse"]},
                "inputSchema": {"type": "object"}
            },
            "required": ["type", "toolName", "inputSchema"],
            "additionalProperties": false
        }),
        output(output_schema),
    )
}
