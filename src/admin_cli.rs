//! `paygate admin ...`: thin client of the admin API for operators.

use clap::{Args, Subcommand};
use serde_json::{json, Value};
use std::process::ExitCode;

#[derive(Args)]
pub struct AdminArgs {
    /// Base URL of the running gateway.
    #[arg(long, env = "PAYGATE_URL", default_value = "http://127.0.0.1:8402")]
    url: String,
    /// Admin token (read from the environment; never pass it on a shared command line).
    #[arg(long, env = "PAYGATE_ADMIN_TOKEN", hide_env_values = true)]
    token: String,
    #[command(subcommand)]
    command: AdminCommand,
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Create an organisation; prints its first API key (shown once).
    CreateOrg {
        #[arg(long)]
        slug: String,
        #[arg(long)]
        name: Option<String>,
        /// Payee address for gateway payments (0x...).
        #[arg(long)]
        receiver_wallet: Option<String>,
        #[arg(long)]
        plan: Option<String>,
    },
    /// List organisations.
    ListOrgs,
    /// Show one organisation.
    GetOrg { slug: String },
    /// Change an organisation: suspension, receiver wallet ("none" clears it), plan, name.
    UpdateOrg {
        slug: String,
        #[arg(long)]
        suspended: Option<bool>,
        #[arg(long)]
        receiver_wallet: Option<String>,
        #[arg(long)]
        plan: Option<String>,
        #[arg(long)]
        name: Option<String>,
        /// Daily cap on MCP tool-call spending in USD ("default" returns to the configured one).
        #[arg(long)]
        mcp_daily_cap_usd: Option<String>,
        /// Corridor platform fee in basis points, 25 to 65 ("default" returns to the configured).
        #[arg(long)]
        platform_fee_bps: Option<String>,
    },
    /// Approve a corridor's KYC: PENDING_KYC -> ACTIVE.
    ApproveKyc { corridor_id: String },
    /// Create another API key for an organisation (shown once).
    CreateKey { slug: String },
    /// List an organisation's keys (ids and dates only).
    ListKeys { slug: String },
    /// Revoke a key; effective immediately.
    RevokeKey { slug: String, key_id: String },
    /// Store the payer wallet for MCP tool calls; the private key is read from the environment
    /// variable named by --key-env (never from the command line, which shells keep).
    SetPayerWallet {
        slug: String,
        #[arg(long, default_value = "PAYGATE_PAYER_KEY")]
        key_env: String,
    },
}

pub fn run(args: AdminArgs) -> anyhow::Result<ExitCode> {
    crate::runtime::block_on(call(args))?
}

async fn call(args: AdminArgs) -> anyhow::Result<ExitCode> {
    use reqwest::Method;
    let (method, path, body) = match args.command {
        AdminCommand::CreateOrg {
            slug,
            name,
            receiver_wallet,
            plan,
        } => {
            let b = given([
                ("slug", Some(json!(slug))),
                ("name", name.map(Value::from)),
                ("receiverWallet", receiver_wallet.map(Value::from)),
                ("plan", plan.map(Value::from)),
            ]);
            (Method::POST, "/admin/orgs".to_string(), Some(b))
        }
        AdminCommand::ListOrgs => (Method::GET, "/admin/orgs".into(), None),
        AdminCommand::GetOrg { slug } => (Method::GET, format!("/admin/orgs/{slug}"), None),
        AdminCommand::UpdateOrg {
            slug,
            suspended,
            receiver_wallet,
            plan,
            name,
            mcp_daily_cap_usd,
            platform_fee_bps,
        } => {
            // `default` (and `none` for the wallet) clears the field: JSON null.
            let or_null = |v: String, clear: &str| {
                if v == clear {
                    Value::Null
                } else {
                    Value::from(v)
                }
            };
            let fee = match platform_fee_bps.as_deref() {
                None => None,
                Some("default") => Some(Value::Null),
                Some(n) => Some(json!(n
                    .parse::<u64>()
                    .map_err(|_| anyhow::anyhow!("--platform-fee-bps takes a number"))?)),
            };
            let b = given([
                (
                    "mcpDailyCapUSD",
                    mcp_daily_cap_usd.map(|v| or_null(v, "default")),
                ),
                ("platformFeeBps", fee),
                ("suspended", suspended.map(Value::from)),
                (
                    "receiverWallet",
                    receiver_wallet.map(|v| or_null(v, "none")),
                ),
                ("plan", plan.map(Value::from)),
                ("name", name.map(Value::from)),
            ]);
            (Method::PATCH, format!("/admin/orgs/{slug}"), Some(b))
        }
        AdminCommand::ApproveKyc { corridor_id } => (
            Method::POST,
            format!("/admin/corridors/{corridor_id}/approve-kyc"),
            None,
        ),
        AdminCommand::CreateKey { slug } => {
            (Method::POST, format!("/admin/orgs/{slug}/keys"), None)
        }
        AdminCommand::ListKeys { slug } => (Method::GET, format!("/admin/orgs/{slug}/keys"), None),
        AdminCommand::SetPayerWallet { slug, key_env } => {
            let key = std::env::var(&key_env)
                .map_err(|_| anyhow::anyhow!("set {key_env} to the payer's private key"))?;
            (
                Method::PUT,
                format!("/admin/orgs/{slug}/payer-wallet"),
                Some(json!({ "privateKey": key })),
            )
        }
        AdminCommand::RevokeKey { slug, key_id } => (
            Method::DELETE,
            format!("/admin/orgs/{slug}/keys/{key_id}"),
            None,
        ),
    };
    let (ok, out) = send(&args.url, &args.token, method, &path, body, &[]).await?;
    print_answer(ok, &out, true)
}

/// A JSON object of the fields given (`Some`), in order; `None` leaves a field out.
pub(crate) fn given<const N: usize>(fields: [(&str, Option<Value>); N]) -> Value {
    Value::Object(
        fields
            .into_iter()
            .filter_map(|(k, v)| Some((k.to_string(), v?)))
            .collect(),
    )
}

/// What a gateway answered: success, and the body (pretty JSON when it is JSON).
pub(crate) struct Answer {
    pub status: reqwest::StatusCode,
    pub json: Option<Value>,
    pub text: String,
}

/// One call of the gateway's API with a bearer token; `headers` are added as given.
pub(crate) async fn send(
    base: &str,
    token: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
    headers: &[(&str, String)],
) -> anyhow::Result<(bool, Answer)> {
    let url = format!("{}{}", base.trim_end_matches('/'), path);
    let mut req = reqwest::Client::new()
        .request(method, &url)
        .bearer_auth(token);
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await?;
    let status = resp.status();
    let text = resp.text().await?;
    let json = serde_json::from_str::<Value>(&text).ok();
    Ok((status.is_success(), Answer { status, json, text }))
}

/// Prints an answer: the body as pretty JSON (or as sent) on stdout when it succeeded, with the
/// status on stderr when not; the exit code says which.
pub(crate) fn print_answer(ok: bool, a: &Answer, pretty: bool) -> anyhow::Result<ExitCode> {
    let body = match (&a.json, pretty) {
        (Some(_), true) => indent(&a.text),
        _ => a.text.clone(),
    };
    if ok {
        if !body.is_empty() {
            println!("{body}");
        }
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("{}\n{body}", a.status);
        Ok(ExitCode::FAILURE)
    }
}

/// Valid JSON text laid out over lines, two spaces per level, every token kept as written (a
/// number is not read into a float and printed again: `0.000001` stays, never `1e-6`).
fn indent(json: &str) -> String {
    let mut out = String::with_capacity(json.len() * 2);
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    let mut chars = json.chars().peekable();
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                let empty = matches!(chars.peek(), Some('}') | Some(']'));
                depth += 1;
                if !empty {
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                if !(out.ends_with('{') || out.ends_with('[')) {
                    newline(&mut out, depth);
                }
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn indenting_keeps_every_token_as_written() {
        let text = r#"{"a":0.000001,"b":[],"c":{"d":"x,\"y\":{"},"e":[1,2]}"#;
        let pretty = super::indent(text);
        assert!(pretty.contains("\"a\": 0.000001"), "{pretty}");
        assert!(pretty.contains(r#""x,\"y\":{""#), "{pretty}");
        let a: serde_json::Value = serde_json::from_str(text).unwrap();
        let b: serde_json::Value = serde_json::from_str(&pretty).unwrap();
        assert_eq!(a, b);
    }
}
