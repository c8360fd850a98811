//! `paygate pay URL`: an agent's side of x402 from the command line. Calls the URL; a `402`
//! with a v2 `PAYMENT-REQUIRED` challenge is paid with the payer key from the environment
//! (`PAYGATE_PAYER_KEY`), by the same signer paygate's MCP tools pay with, if the price is within
//! `--max-usd`; the call is sent again with the `PAYMENT-SIGNATURE` header. The API's answer goes
//! to stdout, the settlement receipt (`PAYMENT-RESPONSE`) to stderr (`--json`: one JSON document
//! with both on stdout). An `auth-capture` offer is paid into escrow (captured once served).
//! `--channel` pays over a payment channel instead (`batch-settlement`).

use alloy_signer_local::PrivateKeySigner;
use anyhow::{anyhow, bail, Context};
use clap::Args;
use paygate_x402::auth_capture::{self, client::EscrowOffer};
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
    /// Pay over a payment channel (x402 `batch-settlement`) where the route offers one: a
    /// deposit the first time (`--deposit-usd`), then a signed voucher per call. The channel's
    /// state comes from the gateway (its corrective 402), so nothing is kept between calls.
    #[arg(long)]
    channel: bool,
    /// With --channel: what the channel is funded with when it needs money, in USD (what is
    /// not spent can be refunded).
    #[arg(long, default_value = "1.00")]
    deposit_usd: String,
    /// With --channel: tells this payer's channels on one route apart.
    #[arg(long, default_value_t = 0)]
    channel_salt: u64,
    /// Pay only under this scheme: `exact`, or `auth-capture` (held in escrow and captured
    /// once the API served the call; a failed call is voided and costs nothing). Default: the
    /// first the route offers that this client pays.
    #[arg(long, value_parser = ["exact", "auth-capture"])]
    scheme: Option<String>,
    /// The payment protocol: `x402` (the default), or `mpp` (the Machine Payments Protocol's
    /// EVM `charge`, answering the route's `WWW-Authenticate: Payment` challenge).
    #[arg(long, value_parser = ["x402", "mpp"], default_value = "x402")]
    protocol: String,
}

pub fn run(args: PayArgs) -> anyhow::Result<ExitCode> {
    crate::runtime::block_on(pay(args))?
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

/// The header a payment goes in: x402's `PAYMENT-SIGNATURE`, or MPP's `Authorization`.
const X402_PAYMENT: &str = "payment-signature";
const MPP_PAYMENT: &str = "authorization";

async fn call(args: &PayArgs, payment: Option<&str>) -> anyhow::Result<Answer> {
    call_with(args, payment.map(|p| (X402_PAYMENT, p))).await
}

async fn call_with(
    args: &PayArgs,
    payment: Option<(&'static str, &str)>,
) -> anyhow::Result<Answer> {
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
    if let Some((name, value)) = payment {
        headers.insert(HeaderName::from_static(name), HeaderValue::from_str(value)?);
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

/// An offer this client can pay.
enum Payable {
    /// `exact`: the requirement as read, and as offered (echoed back when paying).
    Exact(PaymentRequirements, Value),
    /// `auth-capture`: held in escrow, captured once served.
    Escrow(EscrowOffer),
}

impl Payable {
    fn req(&self) -> &PaymentRequirements {
        match self {
            Self::Exact(req, _) => req,
            Self::Escrow(offer) => &offer.req,
        }
    }

    fn scheme(&self) -> &'static str {
        match self {
            Self::Exact(..) => "exact",
            Self::Escrow(_) => auth_capture::SCHEME,
        }
    }

    fn header(&self, signer: &PrivateKeySigner, now: u64) -> anyhow::Result<String> {
        Ok(match self {
            Self::Exact(req, offered) => {
                paygate_x402::sign::payment_header_echoing(req, offered.clone(), signer, now)?
            }
            Self::Escrow(offer) => offer.payment_header(signer, now)?,
        })
    }
}

/// The offer to pay from a v2 challenge: the first (of `scheme`, when given) this client can
/// pay on a network it knows (Base, Base Sepolia).
fn offer(challenge: &Value, scheme: Option<&str>) -> anyhow::Result<Payable> {
    let networks = Networks::from_config(&builtin_networks());
    let resource = challenge["resource"]["url"].as_str().unwrap_or_default();
    let mut problems = Vec::new();
    let offers = challenge["accepts"].as_array().into_iter().flatten();
    for offered in offers.filter(|o| scheme.is_none_or(|s| o["scheme"] == s)) {
        let read = if offered["scheme"] == auth_capture::SCHEME {
            EscrowOffer::read(offered, &networks).map(|mut o| {
                o.req.resource = resource.to_string();
                Payable::Escrow(o)
            })
        } else {
            PaymentRequirements::from_wire(offered, ProtocolVersion::V2, &networks)
                .map(|mut req| {
                    req.resource = resource.to_string();
                    Payable::Exact(req, offered.clone())
                })
                .map_err(Into::into)
        };
        match read {
            Ok(payable) => return Ok(payable),
            Err(e) => problems.push(e.to_string()),
        }
    }
    bail!(
        "no payment offered here can be made: {}",
        if problems.is_empty() {
            format!(
                "the challenge lists none{}",
                scheme.map(|s| format!(" under {s}")).unwrap_or_default()
            )
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
    if args.channel {
        let signer = payer(args.key.as_deref())?;
        return pay_channel(&args, &challenge, &signer, max).await;
    }
    if args.protocol == "mpp" {
        return pay_mpp(&args, &first, max).await;
    }
    let payable = offer(&challenge, args.scheme.as_deref())?;
    let req = payable.req();
    if req.amount.0 > max.0 {
        bail!(
            "the price is ${} and --max-usd is ${}: not paid",
            req.amount.to_decimal(),
            max.to_decimal()
        );
    }
    let signer = payer(args.key.as_deref())?;
    let header = payable.header(&signer, paygate_domain::unix_now())?;
    let paid = json!({
        "amountUSD": req.amount.to_decimal().to_string(),
        "network": req.network.caip2,
        "payTo": req.pay_to.to_checksum(None),
        "payer": signer.address().to_checksum(None),
        "scheme": payable.scheme(),
    });
    let second = call(&args, Some(&header)).await?;
    finish(&args, second, Some(paid))
}

/// Answers the route's MPP `charge` challenge: the EIP-3009 authorization it asks for, in an
/// `Authorization: Payment` credential; the receipt is the `Payment-Receipt`.
async fn pay_mpp(args: &PayArgs, first: &Answer, max: UsdcAmount) -> anyhow::Result<ExitCode> {
    use paygate_gateway::payments::ways::mpp::client;
    let challenge = first
        .headers
        .get_all(reqwest::header::WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.contains("Payment "))
        .ok_or_else(|| anyhow!("this route offers no MPP challenge (WWW-Authenticate: Payment)"))?;
    let networks = Networks::from_config(&builtin_networks());
    let offer = client::offer(challenge, &networks).map_err(|e| anyhow!("{e}"))?;
    let req = &offer.req;
    if req.amount.0 > max.0 {
        bail!(
            "the price is ${} and --max-usd is ${}: not paid",
            req.amount.to_decimal(),
            max.to_decimal()
        );
    }
    let signer = payer(args.key.as_deref())?;
    let credential = offer.credential(&signer).map_err(|e| anyhow!("{e}"))?;
    let paid = json!({
        "amountUSD": req.amount.to_decimal().to_string(),
        "network": req.network.caip2,
        "payTo": req.pay_to.to_checksum(None),
        "payer": signer.address().to_checksum(None),
        "scheme": "mpp/evm/charge",
    });
    let second = call_with(args, Some((MPP_PAYMENT, &credential))).await?;
    finish(args, second, Some(paid))
}

/// Pays over the route's channel: a voucher for what the gateway says was charged plus the
/// price (resynced from the corrective 402 when this process guessed wrong), with a deposit
/// first when the channel cannot cover it.
async fn pay_channel(
    args: &PayArgs,
    challenge: &Value,
    signer: &PrivateKeySigner,
    max: UsdcAmount,
) -> anyhow::Result<ExitCode> {
    use alloy_primitives::{keccak256, B256, U256};
    use paygate_x402::batch::client::PayerChannel;
    let offered = channel_offer(challenge)
        .ok_or_else(|| anyhow!("this route offers no payment channel (batch-settlement)"))?;
    let price: u128 = offered["amount"]
        .as_str()
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| anyhow!("the channel offer's amount is not an integer"))?;
    if price > u128::from(max.0) {
        bail!("the price is {price} base units, above --max-usd: not paid");
    }
    let deposit = UsdcAmount::from_usd_str(&args.deposit_usd)
        .map_err(|e| anyhow!("--deposit-usd {:?}: {e}", args.deposit_usd))?;
    let salt = B256::from(U256::from(args.channel_salt));
    let ch = PayerChannel::for_offer(signer.address(), offered, salt)
        .ok_or_else(|| anyhow!("the channel offer is incomplete: {offered}"))?;
    let mut paid = json!({
        "scheme": "batch-settlement",
        "amountUSD": UsdcAmount(u64::try_from(price)?).to_decimal().to_string(),
        "network": offered["network"],
        "payTo": offered["payTo"],
        "payer": signer.address().to_checksum(None),
        "channelId": format!("{:#x}", ch.id()),
    });
    let mut charged = 0u128;
    for _ in 0..3 {
        let a = call(args, Some(&ch.header(&ch.voucher(charged + price, signer)))).await?;
        if a.status != reqwest::StatusCode::PAYMENT_REQUIRED {
            return finish(args, a, Some(paid));
        }
        let doc = b64_json(&a.headers, "payment-required").unwrap_or_default();
        let state = channel_offer(&doc)
            .and_then(|o| o["extra"]["channelState"]["chargedCumulativeAmount"].as_str())
            .and_then(|c| c.parse::<u128>().ok());
        match doc["error"].as_str().unwrap_or_default() {
            "invalid_batch_settlement_evm_cumulative_amount_mismatch" => {
                charged = state.ok_or_else(|| anyhow!("a corrective 402 without the state"))?;
            }
            "invalid_batch_settlement_evm_cumulative_exceeds_balance" => {
                charged = state.unwrap_or(charged);
                let amount = u128::from(deposit.0).max(price);
                let now = paygate_domain::unix_now();
                let nonce = keccak256(format!("{now}/{}/{charged}", signer.address()));
                let payload = ch.deposit(
                    amount,
                    charged + price,
                    now + 600,
                    U256::from_be_bytes(nonce.0),
                    signer,
                );
                paid["depositUSD"] = UsdcAmount(u64::try_from(amount)?)
                    .to_decimal()
                    .to_string()
                    .into();
                let a = call(args, Some(&ch.header(&payload))).await?;
                return finish(args, a, Some(paid));
            }
            _ => return finish(args, a, None),
        }
    }
    bail!("the gateway kept refusing this channel's vouchers")
}

/// The `batch-settlement` requirement of a challenge.
fn channel_offer(challenge: &Value) -> Option<&Value> {
    challenge["accepts"]
        .as_array()?
        .iter()
        .find(|a| a["scheme"] == paygate_x402::batch::SCHEME)
}

/// Prints the answer (and the receipt); success when the API answered 2xx.
fn finish(args: &PayArgs, a: Answer, paid: Option<Value>) -> anyhow::Result<ExitCode> {
    let receipt = b64_json(&a.headers, "payment-response").or_else(|| {
        let raw = a.headers.get("payment-receipt")?.to_str().ok()?;
        paygate_gateway::payments::ways::mpp::client::receipt(raw)
    });
    if args.json {
        let body = serde_json::from_str::<Value>(&a.body).unwrap_or(Value::String(a.body));
        println!(
            "{}",
            json!({"status": a.status.as_u16(), "body": body, "receipt": receipt, "paid": paid})
        );
    } else {
        if let (Some(p), true) = (&paid, a.status.is_success()) {
            eprintln!(
                "paid ${} on {} to {} ({})",
                p["amountUSD"].as_str().unwrap_or_default(),
                p["network"].as_str().unwrap_or_default(),
                p["payTo"].as_str().unwrap_or_default(),
                p["scheme"].as_str().unwrap_or_default()
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
