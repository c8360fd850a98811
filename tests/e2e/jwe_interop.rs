//! paygate's JWE of CPN payout data (`cpn_client::encrypt` / `decrypt`, on picky's JOSE) against
//! an independent implementation, npm `jose` (the test's node_modules, `make test`): each opens
//! what the other sealed, with the algorithms CPN names.

use crate::common;

use paygate_payouts::cpn_client::{decrypt, encrypt, new_key_pair};

#[test]
fn npm_jose_opens_paygates_jwe_and_paygate_opens_its() {
    let (pem, jwk) = new_key_pair("6f2c1f1e-1b7a-4c53-9d43-0d6f3b8b2a10").unwrap();
    let beneficiary = r#"[{"name":"RECIPIENT_LEGAL_NAME","value":"Ana Souza"}]"#;
    let jwe = encrypt(&jwk, beneficiary.as_bytes()).unwrap();
    let input = serde_json::json!({
        "pem": pem,
        "jwk": serde_json::from_str::<serde_json::Value>(&jwk).unwrap(),
        "jwe": jwe,
        "payload": "{\"SOURCE_OF_FUNDS\":\"API sales\"}",
    });
    let v = common::node_json("jose_jwe.cjs", &input);
    assert_eq!(v["opened"]["plaintext"], beneficiary);
    assert_eq!(v["opened"]["header"]["alg"], "ECDH-ES+A128KW");
    assert_eq!(v["opened"]["header"]["enc"], "A128GCM");
    assert_eq!(
        v["opened"]["header"]["kid"],
        "6f2c1f1e-1b7a-4c53-9d43-0d6f3b8b2a10"
    );
    let sealed = v["sealed"].as_str().unwrap();
    assert_eq!(
        decrypt(&pem, sealed).unwrap(),
        b"{\"SOURCE_OF_FUNDS\":\"API sales\"}"
    );
    // A JWE jose made under another algorithm pair is not taken.
    let (other_pem, _) = new_key_pair("k2").unwrap();
    assert!(decrypt(&other_pem, sealed).is_err());
}
