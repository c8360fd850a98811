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

alloy_sol_types::sol! {
    /// USDC's EIP-2612 permit, as its owner signs it.
    struct Permit {
        address owner;
        address spender;
        uint256 value;
        uint256 nonce;
        uint256 deadline;
    }
    function permit(address owner, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s) external;
    function owner() external view returns (address);
    function execute(address to, bytes data) external returns (bytes);
    function createWallet(address owner, bytes32 salt) external returns (address wallet);
    function approve(address spender, uint256 amount) external returns (bool);
}

/// The proxies' `settleWithPermit` (gas sponsoring) on its own: the payer's USDC permit to
/// Permit2 and the settlement in one call from the facilitator; a permit someone submitted
/// first is skipped, not a failure; without the permit's allowance the settlement reverts.
#[tokio::test]
async fn settle_with_permit_gives_permit2_its_allowance_and_settles_in_one_call() {
    use paygate_x402::permit2::EIP2612Permit;
    let chain = Chain::start();
    let usdc: Address = common::chain::USDC.parse().unwrap();
    let facilitator = address(0);
    let requirements = |amount: u64| {
        json!({"scheme": "upto", "network": "eip155:84532", "asset": usdc.to_checksum(None),
            "amount": amount.to_string(), "payTo": address(9).to_checksum(None),
            "maxTimeoutSeconds": 120, "extra": {"name": "USDC", "version": "2",
            "facilitatorAddress": facilitator.to_checksum(None)}})
    };
    let sign_upto = |payer: usize| {
        node_json(
            "x402_permit2_sign.cjs",
            &json!({"scheme": "upto", "key": KEYS[payer], "requirements": requirements(10_000)}),
        )["payload"]
            .clone()
    };
    // The payer's permit of 10_000 to Permit2 (its first: nonce 0).
    let permit_of = |payer: usize| {
        let owner = address(payer);
        let deadline = U256::from(paygate_domain::unix_now() + 600);
        let digest = Permit {
            owner,
            spender: PERMIT2_ADDRESS,
            value: U256::from(10_000u64),
            nonce: U256::ZERO,
            deadline,
        }
        .eip712_signing_hash(&common::chain::usdc_domain());
        let sig = common::channel::sign(payer, digest);
        EIP2612Permit {
            value: U256::from(10_000u64),
            deadline,
            r: alloy_primitives::B256::from_slice(&sig[..32]),
            s: alloy_primitives::B256::from_slice(&sig[32..64]),
            v: sig[64],
        }
    };
    let with_permit = |p: &Value, permit2612: EIP2612Permit, amount: u64| {
        let auth = &p["permit2Authorization"];
        IUptoPermit2Proxy::settleWithPermitCall {
            permit2612,
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
    };
    let usdc_of = |who: Address| {
        let rpc = chain.rpc.clone();
        async move {
            paygate_x402::facilitator::embedded::balance_of(&rpc, usdc, who)
                .await
                .unwrap()
        }
    };
    let payee_before = usdc_of(address(9)).await;
    // Without any allowance the plain settlement reverts.
    let p = sign_upto(2);
    assert!(chain
        .send(0, UPTO_PROXY_ADDRESS, upto_settle(&p, 4_000))
        .await
        .is_err());
    // Another key's permit gives nothing: the settlement still has no allowance.
    let forged = permit_of(3);
    assert!(chain
        .send(0, UPTO_PROXY_ADDRESS, with_permit(&p, forged, 4_000))
        .await
        .is_err());
    // The payer's own: allowance and charge in one call.
    chain
        .send(0, UPTO_PROXY_ADDRESS, with_permit(&p, permit_of(2), 4_000))
        .await
        .expect("settleWithPermit");
    assert_eq!(
        usdc_of(address(9)).await,
        payee_before + U256::from(4_000u64)
    );
    // A permit someone else submitted first: skipped, the settlement goes on.
    let p4 = sign_upto(4);
    let first = permit_of(4);
    let call = permitCall {
        owner: address(4),
        spender: PERMIT2_ADDRESS,
        value: first.value,
        deadline: first.deadline,
        v: first.v,
        r: first.r,
        s: first.s,
    };
    chain
        .send(7, usdc, call.abi_encode())
        .await
        .expect("front-run permit");
    chain
        .send(0, UPTO_PROXY_ADDRESS, with_permit(&p4, permit_of(4), 1_000))
        .await
        .expect("settleWithPermit after the permit was used");
    assert_eq!(
        usdc_of(address(9)).await,
        payee_before + U256::from(5_000u64)
    );
}

/// The test smart-wallet factory and Multicall3 on their own: the factory deploys a wallet of
/// its owner at the address it states beforehand, once; the wallet makes calls for its owner
/// only; Multicall3's `aggregate3` reports each call and reverts on a failure not allowed.
#[tokio::test]
async fn the_wallet_factory_and_multicall3_do_what_their_interfaces_say() {
    use alloy_provider::Provider;
    use paygate_x402::facilitator::{IMulticall3, MULTICALL3_ADDRESS};
    use paygate_x402::signature::DEV_WALLET_FACTORY_ADDRESS as FACTORY;
    let chain = Chain::start();
    let c = chain.counterfactual_wallet(address(6), 9).await;
    assert!(!chain.has_code(c.address).await);
    chain
        .send(5, FACTORY, c.calldata.to_vec())
        .await
        .expect("createWallet");
    assert!(chain.has_code(c.address).await, "deployed where it said");
    assert!(
        chain.send(5, FACTORY, c.calldata.to_vec()).await.is_err(),
        "a second deployment of the same wallet reverts"
    );
    let read = |to: Address, data: Vec<u8>| {
        let tx = alloy_rpc_types_eth::TransactionRequest::default()
            .to(to)
            .input(data.into());
        let p = chain.provider(0);
        async move { p.call(tx).await }
    };
    let out = read(c.address, ownerCall {}.abi_encode()).await.unwrap();
    assert_eq!(ownerCall::abi_decode_returns(&out).unwrap(), address(6));
    // `execute` is its owner's only.
    let call = executeCall {
        to: TOKEN,
        data: approveCall {
            spender: PERMIT2_ADDRESS,
            amount: U256::MAX,
        }
        .abi_encode()
        .into(),
    };
    assert!(chain.send(5, c.address, call.abi_encode()).await.is_err());
    chain
        .send(6, c.address, call.abi_encode())
        .await
        .expect("the owner's call");
    // Multicall3: a failing call allowed to fail is reported; one not allowed reverts all.
    let ok_call = IMulticall3::Call3 {
        target: c.address,
        allowFailure: true,
        callData: ownerCall {}.abi_encode().into(),
    };
    let failing = |allow| IMulticall3::Call3 {
        target: c.address,
        allowFailure: allow,
        callData: call.abi_encode().into(),
    };
    let out = read(
        MULTICALL3_ADDRESS,
        IMulticall3::aggregate3Call {
            calls: vec![ok_call.clone(), failing(true)],
        }
        .abi_encode(),
    )
    .await
    .unwrap();
    let results = IMulticall3::aggregate3Call::abi_decode_returns(&out).unwrap();
    assert_eq!(
        results.iter().map(|r| r.success).collect::<Vec<_>>(),
        [true, false]
    );
    assert!(read(
        MULTICALL3_ADDRESS,
        IMulticall3::aggregate3Call {
            calls: vec![ok_call, failing(false)],
        }
        .abi_encode(),
    )
    .await
    .is_err());
}
