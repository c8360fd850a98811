//! The dev chain's Permit2 and x402 Permit2 proxies on their own (issue 31, item 5): paygate's
//! implementation of their published interfaces, placed at the canonical addresses by
//! `paygate devchain setup`, settling what the official npm client (@x402/evm's `exact` scheme
//! with `assetTransferMethod: "permit2"`, and its `upto` scheme) signs, for a token without
//! EIP-3009; and refusing what they must refuse. The EIP-712 digest paygate computes
//! (`paygate_x402::permit2`) recovers the same signer as the contracts.

use crate::common;

use alloy_primitives::{Address, U256};
use alloy_sol_types::{SolCall, SolStruct};
use common::chain::{address, Chain, KEYS};
use common::node_json;
use paygate_x402::permit2::{
    self, exact, upto, ExactWitness, IErc20Permit2, IExactPermit2Proxy, IUptoPermit2Proxy,
    PermitTransferFrom, TokenAmount, UptoWitness, DEV_TEST_TOKEN_ADDRESS, EXACT_PROXY_ADDRESS,
    PERMIT2_ADDRESS, UPTO_PROXY_ADDRESS,
};
use serde_json::{json, Value};

const TOKEN: Address = DEV_TEST_TOKEN_ADDRESS;

async fn balance(chain: &Chain, who: Address) -> U256 {
    paygate_x402::facilitator::embedded::balance_of(&chain.rpc, TOKEN, who)
        .await
        .expect("balanceOf")
}

async fn approve_permit2(chain: &Chain, key: usize) {
    let data = IErc20Permit2::approveCall {
        spender: PERMIT2_ADDRESS,
        amount: U256::MAX,
    }
    .abi_encode();
    chain.send(key, TOKEN, data).await.expect("approve Permit2");
}

/// The official client's payload for `scheme` (`exact` or `upto`) over the test token.
fn signed(scheme: &str, payer: usize, amount: u64, extra: Value) -> Value {
    let mut extra_all = json!({"name": "Test Dollar", "version": "1"});
    extra_all
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let requirements = json!({"scheme": scheme, "network": "eip155:84532",
        "asset": TOKEN.to_checksum(None), "amount": amount.to_string(),
        "payTo": address(9).to_checksum(None), "maxTimeoutSeconds": 120, "extra": extra_all});
    node_json(
        "x402_permit2_sign.cjs",
        &json!({"scheme": scheme, "key": KEYS[payer], "requirements": requirements}),
    )["payload"]
        .clone()
}

fn n(v: &Value) -> U256 {
    v.as_str().unwrap().parse().unwrap()
}

fn a(v: &Value) -> Address {
    v.as_str().unwrap().parse().unwrap()
}

fn permit(auth: &Value) -> PermitTransferFrom {
    PermitTransferFrom {
        permitted: TokenAmount {
            token: a(&auth["permitted"]["token"]),
            amount: n(&auth["permitted"]["amount"]),
        },
        nonce: n(&auth["nonce"]),
        deadline: n(&auth["deadline"]),
    }
}

fn signature(p: &Value) -> alloy_primitives::Bytes {
    p["signature"].as_str().unwrap().parse().unwrap()
}

fn exact_settle(p: &Value, to: Address) -> Vec<u8> {
    let auth = &p["permit2Authorization"];
    IExactPermit2Proxy::settleCall {
        permit: permit(auth),
        owner: a(&auth["from"]),
        witness: ExactWitness {
            to,
            validAfter: n(&auth["witness"]["validAfter"]),
        },
        signature: signature(p),
    }
    .abi_encode()
}

fn upto_settle(p: &Value, amount: u64) -> Vec<u8> {
    let auth = &p["permit2Authorization"];
    IUptoPermit2Proxy::settleCall {
        permit: permit(auth),
        amount: U256::from(amount),
        owner: a(&auth["from"]),
        witness: UptoWitness {
            to: a(&auth["witness"]["to"]),
            facilitator: a(&auth["witness"]["facilitator"]),
            validAfter: n(&auth["witness"]["validAfter"]),
        },
        signature: signature(p),
    }
    .abi_encode()
}

#[tokio::test]
async fn the_exact_proxy_settles_what_the_official_client_signs_once() {
    let chain = Chain::start();
    let payee = address(9);
    let p = signed(
        "exact",
        1,
        250_000,
        json!({"assetTransferMethod": "permit2"}),
    );
    let auth = &p["permit2Authorization"];
    assert_eq!(a(&auth["spender"]), EXACT_PROXY_ADDRESS);

    // paygate's own digest recovers the payer from the official client's signature.
    let typed = exact::PermitWitnessTransferFrom {
        permitted: exact::TokenPermissions {
            token: TOKEN,
            amount: U256::from(250_000),
        },
        spender: EXACT_PROXY_ADDRESS,
        nonce: n(&auth["nonce"]),
        deadline: n(&auth["deadline"]),
        witness: exact::Witness {
            to: payee,
            validAfter: U256::ZERO,
        },
    };
    let digest = typed.eip712_signing_hash(&permit2::domain(84532));
    let sig = alloy_primitives::Signature::try_from(signature(&p).as_ref()).unwrap();
    assert_eq!(
        sig.recover_address_from_prehash(&digest).unwrap(),
        address(1)
    );

    // Without the payer's approval of Permit2, nothing can move.
    assert!(chain
        .send(0, EXACT_PROXY_ADDRESS, exact_settle(&p, payee))
        .await
        .is_err());
    approve_permit2(&chain, 1).await;
    // The witness binds the receiver: another `to` is not what was signed.
    assert!(chain
        .send(0, EXACT_PROXY_ADDRESS, exact_settle(&p, address(8)))
        .await
        .is_err());
    let (payer_before, payee_before) = (
        balance(&chain, address(1)).await,
        balance(&chain, payee).await,
    );
    chain
        .send(0, EXACT_PROXY_ADDRESS, exact_settle(&p, payee))
        .await
        .expect("settle");
    assert_eq!(
        balance(&chain, payee).await,
        payee_before + U256::from(250_000)
    );
    assert_eq!(
        balance(&chain, address(1)).await,
        payer_before - U256::from(250_000)
    );
    // The nonce is spent: the same payment again moves nothing.
    assert!(chain
        .send(0, EXACT_PROXY_ADDRESS, exact_settle(&p, payee))
        .await
        .is_err());
    assert_eq!(
        balance(&chain, payee).await,
        payee_before + U256::from(250_000)
    );
    // An upto payload is not the exact proxy's (other spender, other witness type).
    let u = signed(
        "upto",
        1,
        100,
        json!({"facilitatorAddress": address(0).to_checksum(None)}),
    );
    assert!(chain
        .send(0, EXACT_PROXY_ADDRESS, exact_settle(&u, payee))
        .await
        .is_err());
}

#[tokio::test]
async fn the_upto_proxy_settles_at_most_the_ceiling_for_its_facilitator_only() {
    let chain = Chain::start();
    let payee = address(9);
    approve_permit2(&chain, 2).await;
    let facilitator = address(0);
    let p = signed(
        "upto",
        2,
        1_000_000,
        json!({"facilitatorAddress": facilitator.to_checksum(None)}),
    );
    assert_eq!(a(&p["permit2Authorization"]["spender"]), UPTO_PROXY_ADDRESS);
    let before = balance(&chain, payee).await;
    // Above the ceiling, or from another facilitator: refused.
    assert!(chain
        .send(0, UPTO_PROXY_ADDRESS, upto_settle(&p, 1_000_001))
        .await
        .is_err());
    assert!(chain
        .send(7, UPTO_PROXY_ADDRESS, upto_settle(&p, 400_000))
        .await
        .is_err());
    chain
        .send(0, UPTO_PROXY_ADDRESS, upto_settle(&p, 400_000))
        .await
        .expect("settle the actual charge");
    assert_eq!(balance(&chain, payee).await, before + U256::from(400_000));
    assert!(
        chain
            .send(0, UPTO_PROXY_ADDRESS, upto_settle(&p, 1))
            .await
            .is_err(),
        "one settlement per signature"
    );
    let typed = upto::Witness {
        to: payee,
        facilitator,
        validAfter: U256::ZERO,
    };
    assert_eq!(
        typed.eip712_type_hash(),
        alloy_primitives::keccak256("Witness(address to,address facilitator,uint256 validAfter)")
    );
}
