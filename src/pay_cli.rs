//! `paygate pay URL`: an agent's side of x402 from the command line. Calls the URL; a `402`
//! with a v2 `PAYMENT-REQUIRED` challenge is paid with the payer key from the environment
//! (`PAYGATE_PAYER_KEY`), by the same signer paygate's MCP tools pay with, if the price is within
//! `--max-usd`; the call is sent again with the `PAYMENT-SIGNATURE` header. The API's answer goes
//! to stdout, the settlement receipt (`PAYMENT-RESPONSE`) to stderr (`--json`: one JSON document
//! with both on stdout).

use alloy_signer_local::PrivateKeySigner;
use anyhow::{anyhow, bail, Context};
use clap::Args;
use paygate_x402::money::UsdcAmount;
use paygate_x402::network::{builtin_networks, Networks};
use paygate_x402::payment::ProtocolVersion;
use paygate_x402::PaymentRequirements;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::Method;
use serde_json::{json, Value};
use std::process::ExitCode;

#[derive(Args)]
pub struct PayArgs {
    /// The paid URL (for example a paygate route, http://127.0.0.1:8402/gateway/acme/echo).
    url: String,
    /// HTTP method.
    #[arg(long, short = 'X', default_value = "GET")]
    method: String,
    /// Request body, sent as is (with --header for its content type).
    #[arg(long, short = 'd')]
    data: Option<String>,
    /// A request header, `Name: value` (repeatable).
    #[arg(long = "header", short = 'H')]
    headers: Vec<String>,
    /// The most this call may cost, in USD: a dearer challenge is not paid.
    #[arg(long, default_value = "0.10")]
    max_usd: String,
    /// The payer's private key (read from the environment; never on a shared command line).
    #[arg(long, env = "PAYGATE_PAYER_KEY", hide_env_values = true)]
    key: Option<String>,
    /// Print one JSON document: {status, body, receipt, paid}.
    #[arg(long)]
    json: bool,
}

pub fn run(args: PayArgs) -> anyhow::Result<ExitCode> {
    crate::block_on(pay(args))?
}

/// The payer's signer from its key (`PAYGATE_PAYER_KEY`).
pub(crate) fn payer(key: Option<&str>) -> anyhow::Result<PrivateKeySigner> {
    key.ok_or_else(|| anyhow!("set PAYGATE_PAYER_KEY to the payer's private key"))?
        .trim()
        .parse()
        .map_err(|_| anyhow!("PAYGATE_PAYER_KEY is not a private key"))
}

/// An answer as received.
struct Answer {
    status: reqwest::StatusCode,
    headers: HeaderMap,
    body: String,
}

async fn call(args: &PayArgs, payment: Option<&str>) -> anyhow::Result<Answer> {
    let method = Method::from_bytes(args.method.to_ascii_uppercase().as_bytes())
        .map_err(|_| anyhow!("--method {:?} is not an HTTP method", args.method))?;
    let mut headers = HeaderMap::new();
    for h in &args.headers {
        let (name, value) = h
            .split_once(':')
            .ok_or_else(|| anyhow!("--header {h:?} is not `Name: value`"))?;
        headers.append(
            HeaderName::from_bytes(name.trim().as_bytes()).context("header name")?,
            HeaderValue::from_str(value.trim()).context("header value")?,
        );
    }
    if let Some(p) = payment {
        headers.insert("payment-signature", HeaderValue::from_str(p)?);
    }
    let mut req = reqwest::Client::new()
        .request(method, &args.url)
        .headers(headers);
    if let Some(d) = &args.data {
        req = req.body(d.clone());
    }
    let resp = req
        .send()
        .await
        .with_context(|| format!("calling {}", args.url))?;
    Ok(Answer {
        status: resp.status(),
        headers: resp.headers().clone(),
        body: resp.text().await?,
    })
}

/// The JSON of a base64 x402 header of `headers`.
fn b64_json(headers: &HeaderMap, name: &str) -> Option<Value> {
    paygate_x402::b64_json(headers.get(name)?.to_str().ok()?)
}

/// The offer to pay from a v2 challenge: the first `exact` requirement on a network this
/// client knows (Base, Base Sepolia), as read, and as offered (echoed back when paying).
fn offer(challenge: &Value) -> anyhow::Result<(PaymentRequirements, Value)> {
    let networks = Networks::from_config(&builtin_networks());
    let resource = challenge["resource"]["url"].as_str().unwrap_or_default();
    let mut problems = Vec::new();
    for offered in challenge["accepts"].as_array().into_iter().flatten() {
        match PaymentRequirements::from_wire(offered, ProtocolVersion::V2, &networks) {
            Ok(mut req) => {
                req.resource = resource.to_string();
                return Ok((req, offered.clone()));
            }
            Err(e) => problems.push(e.to_string()),
        }
    }
    bail!(
        "no payment offered here can be made: {}",
        if problems.is_empty() {
            "the challenge lists none".to_string()
        } else {
            problems.join("; ")
        }
    )
}

async fn pay(args: PayArgs) -> anyhow::Result<ExitCode> {
    let max = UsdcAmount::from_usd_str(&args.max_usd)
        .map_err(|e| anyhow!("--max-usd {:?}: {e}", args.max_usd))?;
    let first = call(&args, None).await?;
    if first.status != reqwest::StatusCode::PAYMENT_REQUIRED {
        return finish(&args, first, None);
    }
    let challenge = b64_json(&first.headers, "payment-required").ok_or_else(|| {
        anyhow!(
            "402 without an x402 v2 PAYMENT-REQUIRED header: {}",
            first.body
        )
    })?;
    let (req, offered) = offer(&challenge)?;
    if req.amount.0 > max.0 {
        bail!(
            "the price is ${} and --max-usd is ${}: not paid",
            req.amount.to_decimal(),
            max.to_decimal()
        );
    }
    let signer = payer(args.key.as_deref())?;
    let header = paygate_x402::sign::payment_header_echoing(
        &req,
        offered,
        &signer,
        paygate_domain::unix_now(),
    )?;
    let paid = json!({
        "amountUSD": req.amount.to_decimal().to_string(),
        "network": req.network.caip2,
        "payTo": req.pay_to.to_checksum(None),
        "payer": signer.address().to_checksum(None),
    });
    let second = call(&args, Some(&header)).await?;
    finish(&args, second, Some(paid))
}

/// Prints the answer (and the receipt); success when the API answered 2xx.
fn finish(args: &PayArgs, a: Answer, paid: Option<Value>) -> anyhow::Result<ExitCode> {
    let receipt = b64_json(&a.headers, "payment-response");
    if args.json {
        let body = serde_json::from_str::<Value>(&a.body).unwrap_or(Value::String(a.body));
        println!(
            "{}",
            json!({"status": a.status.as_u16(), "body": body, "receipt": receipt, "paid": paid})
        );
    } else {
        if let (Some(p), true) = (&paid, a.status.is_success()) {
            eprintln!(
                "paid ${} on {} to {}",
                p["amountUSD"].as_str().unwrap_or_default(),
                p["network"].as_str().unwrap_or_default(),
                p["payTo"].as_str().unwrap_or_default()
            );
        }
        if let Some(r) = &receipt {
            eprintln!("receipt {r}");
        }
        if !a.status.is_success() {
            eprintln!("{}", a.status);
        }
        println!("{}", a.body);
    }
    Ok(if a.status.is_success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
