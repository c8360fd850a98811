use super::*;
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;

const URI: &str = "https://pay.example.com/gateway/acme/data";
const CHAIN: &str = "eip155:84532";

fn origin() -> Origin {
    Origin::of("https://pay.example.com").unwrap()
}

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
}

/// A sign-in built from a challenge's declaration, as the official client builds it, signed by
/// `key` (the address named is `key`'s unless `address` says otherwise).
fn signed(key: &PrivateKeySigner, edit: impl FnOnce(&mut serde_json::Value)) -> SignIn {
    let decl = declaration(&origin(), URI, CHAIN, now());
    let mut fields = decl["info"].clone();
    fields["address"] = key.address().to_checksum(None).into();
    fields["chainId"] = CHAIN.into();
    fields["type"] = "eip191".into();
    fields["signature"] = "0x".into();
    edit(&mut fields);
    let unsigned: SignIn = serde_json::from_value(fields.clone()).unwrap();
    let chain = 84532;
    let address = crate::address::parse_address(&unsigned.address).unwrap();
    let Ok(message) = unsigned.message(chain, address) else {
        // Fields no SIWE message holds: left unsigned, refused before any signature check.
        return unsigned;
    };
    let text = message.to_string();
    let sig = key.sign_message_sync(text.as_bytes()).unwrap();
    fields["signature"] = format!("0x{}", hex::encode(sig.as_bytes())).into();
    serde_json::from_value(fields).unwrap()
}

fn refusal(s: &SignIn, at: OffsetDateTime) -> &'static str {
    match s.check(&origin(), URI, CHAIN, at) {
        Ok(_) => "accepted",
        Err(e) => e.reason(),
    }
}

#[test]
fn a_fresh_sign_in_for_this_origin_and_route_names_its_signer() {
    let key = PrivateKeySigner::random();
    let s = signed(&key, |_| {});
    let checked = s.check(&origin(), URI, CHAIN, now()).unwrap();
    assert_eq!(checked.address, key.address());
    assert_eq!(
        checked.nonce_until,
        1_800_000_000 + MAX_AGE_SECS + CLOCK_SKEW_SECS
    );
    assert!(matches!(s.signer(&checked).unwrap(), Signer::Key(a) if a == key.address()));
    // The header form: base64 JSON.
    use base64::Engine;
    let raw = serde_json::json!({
        "domain": s.domain, "address": s.address, "statement": s.statement, "uri": s.uri,
        "version": s.version, "chainId": s.chain_id, "type": s.kind, "nonce": s.nonce,
        "issuedAt": s.issued_at, "expirationTime": s.expiration_time,
        "resources": s.resources, "signature": s.signature,
    });
    let header = base64::engine::general_purpose::STANDARD.encode(raw.to_string());
    let back = SignIn::from_header(header.as_bytes()).unwrap();
    assert!(back.check(&origin(), URI, CHAIN, now()).is_ok());
    assert_eq!(
        SignIn::from_header(b"not base64!").unwrap_err().reason(),
        "invalid_siwx_payload"
    );
}

#[test]
fn each_bad_field_is_refused_with_its_reason() {
    let key = PrivateKeySigner::random();
    let at = |s: i64| now() + time::Duration::seconds(s);
    let domain = signed(&key, |f| f["domain"] = "evil.example.com".into());
    assert_eq!(refusal(&domain, now()), "invalid_siwx_domain_mismatch");
    let uri = signed(&key, |f| {
        f["uri"] = "https://pay.example.com/gateway/acme/other".into()
    });
    assert_eq!(refusal(&uri, now()), "invalid_siwx_uri_mismatch");
    let fine = signed(&key, |_| {});
    assert_eq!(refusal(&fine, at(MAX_AGE_SECS as i64 - 1)), "accepted");
    assert_eq!(
        refusal(&fine, at(MAX_AGE_SECS as i64)),
        "invalid_siwx_expired"
    );
    let lasting = signed(&key, |f| f["expirationTime"] = serde_json::Value::Null);
    assert_eq!(refusal(&lasting, at(MAX_AGE_SECS as i64)), "accepted");
    assert_eq!(
        refusal(&lasting, at(MAX_AGE_SECS as i64 + 1)),
        "invalid_siwx_issued_at_too_old"
    );
    assert_eq!(refusal(&fine, at(-(CLOCK_SKEW_SECS as i64))), "accepted");
    assert_eq!(
        refusal(&fine, at(-(CLOCK_SKEW_SECS as i64) - 1)),
        "invalid_siwx_issued_at_in_future"
    );
    let later = signed(&key, |f| f["notBefore"] = "2027-01-16T08:00:00.000Z".into());
    assert_eq!(refusal(&later, now()), "invalid_siwx_not_yet_valid");
    let garbled = signed(&key, |f| f["issuedAt"] = "yesterday".into());
    assert_eq!(refusal(&garbled, now()), "invalid_siwx_issued_at");
    let short = signed(&key, |f| f["nonce"] = "abc".into());
    assert_eq!(refusal(&short, now()), "invalid_siwx_nonce");
    let odd = signed(&key, |f| f["nonce"] = "abcd-efgh-ijkl".into());
    assert_eq!(refusal(&odd, now()), "invalid_siwx_nonce");
    let chain = signed(&key, |f| f["chainId"] = "eip155:1".into());
    assert_eq!(refusal(&chain, now()), "invalid_siwx_unsupported_chain");
    let solana = signed(&key, |f| f["chainId"] = "solana:abc".into());
    assert_eq!(refusal(&solana, now()), "invalid_siwx_chain_id");
}

#[test]
fn a_signature_not_the_addresses_key_is_left_to_the_chain() {
    let key = PrivateKeySigner::random();
    let other = PrivateKeySigner::random();
    // Signed by `other` for `key`'s address: only a smart wallet at that address could accept it.
    let mut s = signed(&other, |_| {});
    s.address = key.address().to_checksum(None);
    let checked = s.check(&origin(), URI, CHAIN, now()).unwrap();
    match s.signer(&checked).unwrap() {
        Signer::AskChain { address, hash, .. } => {
            assert_eq!(address, key.address());
            assert_eq!(hash.0, checked.message.eip191_hash().unwrap());
        }
        Signer::Key(_) => panic!("another key's signature accepted"),
    }
    s.signature = "0xzz".into();
    assert!(matches!(
        s.signer(&checked),
        Err(SignInError::MalformedSignature)
    ));
}

#[test]
fn the_declaration_carries_what_the_official_client_reads() {
    let d = declaration(&origin(), URI, CHAIN, now());
    assert_eq!(d["info"]["domain"], "pay.example.com");
    assert_eq!(d["info"]["issuedAt"], "2027-01-15T08:00:00.000Z");
    assert_eq!(d["info"]["expirationTime"], "2027-01-15T08:05:00.000Z");
    assert_eq!(d["supportedChains"][0]["chainId"], CHAIN);
    assert_eq!(d["supportedChains"][0]["type"], "eip191");
    let nonce = d["info"]["nonce"].as_str().unwrap();
    assert!(nonce.len() >= 8 && nonce.bytes().all(|b| b.is_ascii_alphanumeric()));
    assert_ne!(
        declaration(&origin(), URI, CHAIN, now())["info"]["nonce"],
        nonce,
        "fresh"
    );
    assert_eq!(
        Origin::of("http://127.0.0.1:8402/x").unwrap(),
        Origin {
            domain: "127.0.0.1:8402".into(),
            origin: "http://127.0.0.1:8402".into()
        }
    );
}
