//! The payer's side of MPP's EVM `charge` (`paygate pay --protocol mpp`): read the `Payment`
//! challenge of a `402`, sign the EIP-3009 authorization it asks for (to its recipient, for its
//! amount, valid until it expires, its nonce bound to the challenge), and write the
//! `Authorization: Payment` credential that answers it.

use super::wire;
use alloy_primitives::{Address, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use paygate_x402::money::UsdcAmount;
use paygate_x402::network::Networks;
use paygate_x402::payment::SignedAuthorization;
use paygate_x402::PaymentRequirements;
use std::collections::BTreeMap;

/// A `charge` challenge this client can pay.
pub struct Offer {
    params: BTreeMap<String, String>,
    /// What it asks, in the token's units, and the requirement it is paid under.
    pub req: PaymentRequirements,
    amount: U256,
    expires: u64,
}

/// The auth-params of the `Payment` challenge in a `WWW-Authenticate` value (quoted strings
/// with their escapes; other schemes before it skipped).
fn params(header: &str) -> Option<BTreeMap<String, String>> {
    let start = header.find("Payment ")?;
    let mut rest = &header[start + "Payment ".len()..];
    let mut out = BTreeMap::new();
    loop {
        rest = rest.trim_start_matches([' ', ',']);
        let Some((key, after)) = rest.split_once('=') else {
            break;
        };
        if key.contains(' ') {
            break; // the next scheme
        }
        let (value, next) = match after.strip_prefix('"') {
            Some(q) => {
                let mut value = String::new();
                let mut chars = q.char_indices();
                let mut end = q.len();
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => value.extend(chars.next().map(|(_, c)| c)),
                        '"' => {
                            end = i + 1;
                            break;
                        }
                        c => value.push(c),
                    }
                }
                (value, &q[end..])
            }
            None => {
                let end = after.find(',').unwrap_or(after.len());
                (after[..end].trim().to_string(), &after[end..])
            }
        };
        out.insert(key.trim().to_ascii_lowercase(), value);
        rest = next;
    }
    Some(out)
}

/// The `charge` offer in `www_authenticate`, on a network and token `networks` know.
pub fn offer(www_authenticate: &str, networks: &Networks) -> Result<Offer, String> {
    let params = params(www_authenticate).ok_or("the 402 carries no Payment challenge")?;
    let field = |k: &str| params.get(k).ok_or(format!("the challenge has no {k}"));
    if field("method")? != wire::METHOD || field("intent")? != wire::INTENT {
        return Err("the challenge is not EVM charge".into());
    }
    let request = URL_SAFE_NO_PAD
        .decode(field("request")?.trim_end_matches('='))
        .map_err(|_| "the challenge's request is not base64url")?;
    let request: serde_json::Value =
        serde_json::from_slice(&request).map_err(|_| "the challenge's request is not JSON")?;
    let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
    let amount: U256 = text(&request["amount"])
        .and_then(|a| a.parse().ok())
        .ok_or("the request has no amount")?;
    let address = |v: &serde_json::Value| text(v).and_then(|a| a.parse::<Address>().ok());
    let currency = address(&request["currency"]).ok_or("the request has no currency")?;
    let recipient = address(&request["recipient"]).ok_or("the request has no recipient")?;
    let chain_id = request["methodDetails"]["chainId"]
        .as_u64()
        .ok_or("the request has no chain")?;
    let network = networks
        .resolve(&format!("eip155:{chain_id}"))
        .ok_or(format!(
            "chain {chain_id} is not a network this client knows"
        ))?;
    let (network, token) = network
        .token_symbol(currency)
        .and_then(|s| network.with_token(&s))
        .ok_or(format!("{currency} is not a token this client knows"))?;
    let expires = time::OffsetDateTime::parse(
        field("expires")?,
        &time::format_description::well_known::Rfc3339,
    )
    .map_err(|_| "the challenge's expiry is not RFC 3339")?
    .unix_timestamp();
    let scale = U256::from(10u64).pow(U256::from(token.decimals.saturating_sub(6)));
    let usd = u64::try_from(amount / scale).map_err(|_| "the amount is too large")?;
    Ok(Offer {
        req: PaymentRequirements {
            network,
            amount: UsdcAmount(usd),
            pay_to: recipient,
            resource: String::new(),
            description: String::new(),
            mime_type: String::new(),
            max_timeout_seconds: 0,
            token,
        },
        params,
        amount,
        expires: u64::try_from(expires).unwrap_or_default(),
    })
}

impl Offer {
    /// The `Authorization` value paying this offer as `signer`.
    pub fn credential(&self, signer: &PrivateKeySigner) -> Result<String, String> {
        let p = &self.params;
        let mut auth = SignedAuthorization {
            from: signer.address(),
            to: self.req.pay_to,
            value: self.amount,
            valid_after: U256::ZERO,
            valid_before: U256::from(self.expires),
            nonce: wire::challenge_nonce(&p["id"], &p["realm"]),
            signature: Default::default(),
        };
        let domain = paygate_x402::verify::token_domain(&self.req);
        let hash = paygate_x402::verify::signing_hash(&auth, &domain);
        let sig = signer.sign_hash_sync(&hash).map_err(|e| e.to_string())?;
        auth.signature = sig.as_bytes().to_vec().into();
        let mut challenge = serde_json::Map::new();
        for k in [
            "id", "realm", "method", "intent", "request", "expires", "opaque", "digest",
        ] {
            if let Some(v) = p.get(k) {
                challenge.insert(k.into(), v.clone().into());
            }
        }
        let chain_id = self.req.network.config.chain_id;
        let from = auth.from.to_checksum(None);
        let doc = serde_json::json!({
            "challenge": challenge,
            "payload": {
                "type": "authorization", "from": from, "to": auth.to.to_checksum(None),
                "value": auth.value.to_string(), "validAfter": "0",
                "validBefore": auth.valid_before.to_string(),
                "nonce": format!("{:#x}", auth.nonce),
                "signature": format!("0x{}", alloy_primitives::hex::encode(&auth.signature)),
            },
            "source": format!("did:pkh:eip155:{chain_id}:{from}"),
        });
        Ok(format!(
            "Payment {}",
            URL_SAFE_NO_PAD.encode(doc.to_string())
        ))
    }
}

/// The challenge of a `WWW-Authenticate: Payment` value as MCP carries it (`mppx`'s challenge
/// object: the auth-params, `request` decoded).
pub fn challenge_object(header: &str) -> Option<serde_json::Value> {
    let p = params(header)?;
    let request = URL_SAFE_NO_PAD
        .decode(p.get("request")?.trim_end_matches('='))
        .ok()?;
    let mut object = serde_json::Map::new();
    for (k, v) in &p {
        object.insert(k.clone(), v.clone().into());
    }
    object.insert("request".into(), serde_json::from_slice(&request).ok()?);
    Some(object.into())
}

/// `v` with every object's keys sorted, printed compactly: RFC 8785's form for the JSON a
/// challenge's `request` holds (strings, integers, arrays, objects).
fn canonical(v: &serde_json::Value) -> String {
    fn sorted(v: &serde_json::Value) -> serde_json::Value {
        match v {
            serde_json::Value::Object(m) => {
                let mut keys: Vec<_> = m.keys().collect();
                keys.sort();
                let mut out = serde_json::Map::new();
                for k in keys {
                    out.insert(k.clone(), sorted(&m[k]));
                }
                out.into()
            }
            serde_json::Value::Array(a) => a.iter().map(sorted).collect(),
            other => other.clone(),
        }
    }
    sorted(v).to_string()
}

/// The `Authorization` value of a credential as MCP carries it (`mppx`'s credential object,
/// its challenge's `request` decoded): the request encoded again as the challenge had it.
pub fn credential_header(credential: &serde_json::Value) -> Option<String> {
    let mut doc = credential.clone();
    let request = doc.get("challenge")?.get("request")?;
    let encoded = match request {
        serde_json::Value::String(s) => s.clone(),
        object => URL_SAFE_NO_PAD.encode(canonical(object)),
    };
    doc["challenge"]["request"] = encoded.into();
    doc.get("payload")?;
    Some(format!(
        "Payment {}",
        URL_SAFE_NO_PAD.encode(doc.to_string())
    ))
}

/// A `Payment-Receipt` value, decoded (base64url JSON).
pub fn receipt(header: &str) -> Option<serde_json::Value> {
    let json = URL_SAFE_NO_PAD
        .decode(header.trim().trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&json).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_encoded_again_as_the_challenge_had_it() {
        let json = r#"{"amount":"1","currency":"0xA","methodDetails":{"chainId":1,"credentialTypes":["authorization"],"decimals":6},"recipient":"0xB"}"#;
        let request = URL_SAFE_NO_PAD.encode(json);
        let header = format!(
            r#"Payment id="i", realm="r", method="evm", intent="charge", request="{request}""#
        );
        let object = challenge_object(&header).unwrap();
        assert_eq!(object["request"]["methodDetails"]["chainId"], 1);
        let credential = serde_json::json!({"challenge": object, "payload": {}});
        let again = credential_header(&credential).unwrap();
        let doc = URL_SAFE_NO_PAD
            .decode(again.trim_start_matches("Payment "))
            .unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&doc).unwrap();
        assert_eq!(doc["challenge"]["request"], request);
    }

    #[test]
    fn auth_params_are_read_with_their_escapes_and_other_schemes_skipped() {
        let p =
            params(r#"Bearer realm="x", Payment id="a\"b", realm="r", expires=now, method="evm""#)
                .unwrap();
        assert_eq!(p["id"], "a\"b");
        assert_eq!(p["realm"], "r");
        assert_eq!(p["expires"], "now");
        assert_eq!(p["method"], "evm");
        assert!(params("Bearer x").is_none());
    }
}
