//! The dev chain's batch-settlement contract on its own (`shared/contracts`, placed at the
//! canonical address by `paygate devchain setup --contracts`), on a real anvil with Circle's
//! USDC: its EIP-712 digests agree with `paygate_x402::batch` and with the official npm client's
//! channel id and voucher; a deposit moves USDC through the ERC-3009 collector once; claims in
//! one transaction per batch move each voucher's amount once; settle pays the receiver; refunds
//! and the payer's withdrawal return only what was not claimed.

use crate::common;

use alloy_primitives::aliases::U40;
use alloy_primitives::{B256, U256};
use alloy_sol_types::SolCall;
use common::chain::{self, address, Chain, USDC};
use common::channel::{self, sign, voucher, CHAIN_ID};
use paygate_x402::batch::{self, ChannelConfig, ClaimEntry, IBatchSettlement, SETTLEMENT_ADDRESS};

// Accounts: 0 relayer (submits every transaction it may), 1 and 2 payers, 3 the receiver
// authorizer, 4 the receiver.
const PAYER: usize = 1;
const OTHER_PAYER: usize = 2;
const AUTHORIZER: usize = 3;
const RECEIVER: usize = 4;

fn config(payer: usize, salt: u8) -> ChannelConfig {
    ChannelConfig {
        payer: address(payer),
        payerAuthorizer: address(payer),
        receiver: address(RECEIVER),
        receiverAuthorizer: address(AUTHORIZER),
        token: USDC.parse().unwrap(),
        withdrawDelay: U40::from(900),
        salt: B256::repeat_byte(salt),
    }
}

fn claim(c: &ChannelConfig, max: u128, total: u128, key: usize) -> IBatchSettlement::VoucherClaim {
    IBatchSettlement::VoucherClaim {
        voucher: IBatchSettlement::VoucherBody {
            channel: c.clone(),
            maxClaimableAmount: max,
        },
        signature: voucher(c, max, key),
        totalClaimed: total,
    }
}

fn entries(claims: &[IBatchSettlement::VoucherClaim]) -> Vec<ClaimEntry> {
    claims
        .iter()
        .map(|c| ClaimEntry {
            channelId: c.voucher.channel.channel_id(CHAIN_ID),
            maxClaimableAmount: c.voucher.maxClaimableAmount,
            totalClaimed: c.totalClaimed,
        })
        .collect()
}

struct Dev {
    chain: Chain,
}

impl Dev {
    /// Sends `data` to the settlement contract from `key`; `Ok(gas used)` or the revert.
    async fn send(&self, key: usize, data: Vec<u8>) -> Result<u64, String> {
        self.chain.send(key, SETTLEMENT_ADDRESS, data).await
    }

    async fn view<C: SolCall>(&self, call: C) -> C::Return {
        self.chain.view(SETTLEMENT_ADDRESS, call).await
    }

    async fn channel(&self, c: &ChannelConfig) -> (u128, u128) {
        let r = self
            .view(IBatchSettlement::channelsCall {
                channelId: c.channel_id(CHAIN_ID),
            })
            .await;
        (r.balance, r.totalClaimed)
    }
}

/// `payer`'s signed deposit of `amount` into `c` (ERC-3009 to the collector, the nonce bound to
/// the channel and `salt`).
fn deposit_call(c: &ChannelConfig, payer: usize, amount: u64, salt: u64) -> Vec<u8> {
    batch::deposit_call(c, &channel::deposit(c, payer, amount, salt)).abi_encode()
}

#[tokio::test]
async fn digests_agree_with_the_contract_and_the_official_client() {
    let dev = Dev {
        chain: Chain::start(),
    };
    let c = config(PAYER, 7);
    let id = c.channel_id(CHAIN_ID);
    assert_eq!(
        dev.view(IBatchSettlement::getChannelIdCall { config: c.clone() })
            .await,
        id
    );
    assert_eq!(
        dev.view(IBatchSettlement::getVoucherDigestCall {
            channelId: id,
            maxClaimableAmount: 123_456,
        })
        .await,
        batch::voucher_digest(CHAIN_ID, id, 123_456)
    );
    assert_eq!(
        dev.view(IBatchSettlement::getRefundDigestCall {
            channelId: id,
            nonce: U256::from(3),
            amount: 77,
        })
        .await,
        batch::refund_digest(CHAIN_ID, id, U256::from(3), 77)
    );
    let claims = vec![
        claim(&c, 500, 400, PAYER),
        claim(&config(OTHER_PAYER, 1), 9, 9, OTHER_PAYER),
    ];
    assert_eq!(
        dev.view(IBatchSettlement::getClaimBatchDigestCall {
            voucherClaims: claims.clone(),
        })
        .await,
        batch::claim_batch_digest(CHAIN_ID, &entries(&claims))
    );

    // The official client computes the same channel id and signs the same voucher.
    let input = serde_json::json!({
        "config": {
            "payer": c.payer.to_checksum(None),
            "payerAuthorizer": c.payerAuthorizer.to_checksum(None),
            "receiver": c.receiver.to_checksum(None),
            "receiverAuthorizer": c.receiverAuthorizer.to_checksum(None),
            "token": c.token.to_checksum(None),
            "withdrawDelay": c.withdrawDelay.to::<u64>(),
            "salt": format!("{:#x}", c.salt),
        },
        "chainId": CHAIN_ID,
        "key": chain::KEYS[PAYER],
        "max": "123456",
        "deposit": "500000",
        "asset": {"name": "USDC", "version": "2"},
    });
    let facts = common::node_json("x402_channel_facts.cjs", &input);
    assert_eq!(facts["channelId"], format!("{id:#x}"));
    let sig = facts["voucher"]["signature"].as_str().unwrap();
    let sig = alloy_primitives::hex::decode(sig).unwrap();
    paygate_x402::verify::check_eoa_signature(
        &batch::voucher_digest(CHAIN_ID, id, 123_456),
        &sig,
        c.voucher_signer(),
    )
    .expect("the official client's voucher verifies locally");

    // The official client's deposit payload parses, matches the route's offer, verifies locally
    // (voucher and ERC-3009 authorization) and, submitted as paygate encodes it, deposits once.
    let wire: batch::ChannelPayloadWire =
        serde_json::from_value(facts["deposit"].clone()).expect("a deposit payload");
    let payment = batch::ChannelPayment::parse(&wire, CHAIN_ID).expect("parses");
    assert_eq!((payment.channel_id, payment.max_claimable), (id, 123_456));
    let offer = batch::ChannelOffer {
        receiver: c.receiver,
        receiver_authorizer: c.receiverAuthorizer,
        token: c.token,
        withdraw_delay: 900,
    };
    payment.check_offer(&offer).expect("the route's channel");
    assert_eq!(payment.check_voucher(CHAIN_ID), Ok(None));
    let domain = chain::usdc_domain();
    assert_eq!(
        payment.check_deposit(&domain, chain::now(), 6),
        Ok(None),
        "the deposit's authorization verifies locally"
    );
    for (bad, why) in [
        (
            batch::ChannelOffer {
                receiver: address(0),
                ..offer.clone()
            },
            batch::ChannelRejection::ReceiverMismatch,
        ),
        (
            batch::ChannelOffer {
                receiver_authorizer: address(0),
                ..offer.clone()
            },
            batch::ChannelRejection::ReceiverAuthorizerMismatch,
        ),
        (
            batch::ChannelOffer {
                token: address(0),
                ..offer.clone()
            },
            batch::ChannelRejection::TokenMismatch,
        ),
        (
            batch::ChannelOffer {
                withdraw_delay: 901,
                ..offer.clone()
            },
            batch::ChannelRejection::WithdrawDelayMismatch,
        ),
    ] {
        assert_eq!(payment.check_offer(&bad), Err(why));
    }
    // The deposit's authorization: too late to settle, not valid yet, altered after signing.
    assert_eq!(
        payment.check_deposit(&domain, chain::now() + 3600, 6),
        Err(batch::ChannelRejection::DepositExpired)
    );
    let altered = |change: fn(&mut batch::Erc3009Deposit)| {
        let mut p = payment.clone();
        if let batch::ChannelAction::Deposit(d) = &mut p.action {
            change(d);
        }
        p.check_deposit(&domain, chain::now(), 6)
    };
    assert_eq!(
        altered(|d| d.valid_after = U256::from(chain::now() + 60)),
        Err(batch::ChannelRejection::DepositNotYetValid)
    );
    // Altered after signing: not the payer's key, so only the chain (EIP-1271, for a payer
    // that may be a smart wallet) can still accept it; the gateway asks it.
    assert!(
        matches!(altered(|d| d.amount += 1), Ok(Some(ref c)) if c.signer == payment.config.payer),
        "the chain is asked"
    );
    let batch::ChannelAction::Deposit(d) = &payment.action else {
        panic!("a deposit")
    };
    let call = batch::deposit_call(&payment.config, d).abi_encode();
    dev.send(0, call.clone())
        .await
        .expect("the official deposit lands");
    assert_eq!(dev.channel(&c).await, (500_000, 0));
    assert!(dev.send(0, call).await.is_err(), "and only once");
    assert_eq!(dev.channel(&c).await, (500_000, 0));
}

#[tokio::test]
async fn deposit_claim_settle_refund_and_withdraw_move_each_amount_once() {
    let dev = Dev {
        chain: Chain::start(),
    };
    let c = config(PAYER, 1);
    let payer_before = dev.chain.balance(address(PAYER)).await;

    // Deposit 1 USDC through the ERC-3009 collector, submitted by the relayer.
    let deposit = deposit_call(&c, PAYER, 1_000_000, 42);
    dev.send(0, deposit.clone()).await.expect("deposit");
    assert_eq!(dev.channel(&c).await, (1_000_000, 0));
    assert_eq!(
        dev.chain.balance(address(PAYER)).await,
        payer_before - 1_000_000
    );
    assert_eq!(dev.chain.balance(SETTLEMENT_ADDRESS).await, 1_000_000);
    // The same authorization again: refused by the token, nothing moves.
    assert!(dev.send(0, deposit).await.is_err());
    assert_eq!(dev.channel(&c).await, (1_000_000, 0));
    // An authorization for this channel cannot fund another (its nonce names the channel).
    let other = config(PAYER, 2);
    let mut stolen = deposit_call(&c, PAYER, 1_000, 43);
    let decoded = IBatchSettlement::depositCall::abi_decode(&stolen).unwrap();
    stolen = IBatchSettlement::depositCall {
        config: other.clone(),
        ..decoded
    }
    .abi_encode();
    assert!(dev.send(0, stolen).await.is_err());
    assert_eq!(dev.channel(&other).await, (0, 0));

    // Claim 250000 of a voucher for 300000, with the authorizer's signature over the batch.
    let claims = vec![claim(&c, 300_000, 250_000, PAYER)];
    let auth = sign(
        AUTHORIZER,
        batch::claim_batch_digest(CHAIN_ID, &entries(&claims)),
    );
    let call = IBatchSettlement::claimWithSignatureCall {
        voucherClaims: claims.clone(),
        authorizerSignature: auth.clone(),
    }
    .abi_encode();
    dev.send(0, call.clone()).await.expect("claim");
    assert_eq!(dev.channel(&c).await, (1_000_000, 250_000));
    // The same claim again moves nothing.
    dev.send(0, call).await.expect("claim again is a no-op");
    assert_eq!(dev.channel(&c).await, (1_000_000, 250_000));
    let pool = dev
        .view(IBatchSettlement::receiversCall {
            receiver: address(RECEIVER),
            token: USDC.parse().unwrap(),
        })
        .await;
    assert_eq!((pool.totalClaimed, pool.totalSettled), (250_000, 0));

    // Refused claims: a forged voucher, a claim above its voucher, a claim above the balance,
    // a batch signed by someone else than the receiver authorizer.
    for (bad, signer_key) in [
        (vec![claim(&c, 400_000, 400_000, OTHER_PAYER)], AUTHORIZER),
        (vec![claim(&c, 300_000, 300_001, PAYER)], AUTHORIZER),
        (vec![claim(&c, 2_000_000, 1_500_000, PAYER)], AUTHORIZER),
        (vec![claim(&c, 400_000, 400_000, PAYER)], OTHER_PAYER),
    ] {
        let sig = sign(
            signer_key,
            batch::claim_batch_digest(CHAIN_ID, &entries(&bad)),
        );
        let call = IBatchSettlement::claimWithSignatureCall {
            voucherClaims: bad,
            authorizerSignature: sig,
        }
        .abi_encode();
        assert!(dev.send(0, call).await.is_err());
    }
    assert_eq!(dev.channel(&c).await, (1_000_000, 250_000));

    // Settle pays the receiver the claimed sum once.
    let receiver_before = dev.chain.balance(address(RECEIVER)).await;
    let settle = IBatchSettlement::settleCall {
        receiver: address(RECEIVER),
        token: USDC.parse().unwrap(),
    }
    .abi_encode();
    dev.send(0, settle.clone()).await.expect("settle");
    assert_eq!(
        dev.chain.balance(address(RECEIVER)).await,
        receiver_before + 250_000
    );
    // Again: nothing left to settle is a no-op (a repeated claim's settle must not revert it).
    dev.send(0, settle)
        .await
        .expect("a settle with nothing left");
    assert_eq!(
        dev.chain.balance(address(RECEIVER)).await,
        receiver_before + 250_000
    );

    // A cooperative refund signed by the receiver authorizer, once per nonce; never more than
    // the unclaimed balance.
    let payer_mid = dev.chain.balance(address(PAYER)).await;
    let id = c.channel_id(CHAIN_ID);
    let refund = |amount: u128, nonce: u64| IBatchSettlement::refundWithSignatureCall {
        config: c.clone(),
        amount,
        nonce: U256::from(nonce),
        receiverAuthorizerSignature: sign(
            AUTHORIZER,
            batch::refund_digest(CHAIN_ID, id, U256::from(nonce), amount),
        ),
    };
    dev.send(0, refund(100_000, 0).abi_encode())
        .await
        .expect("refund");
    assert!(dev.send(0, refund(100_000, 0).abi_encode()).await.is_err());
    assert!(dev.send(0, refund(700_000, 1).abi_encode()).await.is_err());
    assert_eq!(dev.channel(&c).await, (900_000, 250_000));
    assert_eq!(dev.chain.balance(address(PAYER)).await, payer_mid + 100_000);

    // The payer's escape hatch: not before the delay; then the unclaimed rest comes back, and a
    // claim made during the delay is honoured first.
    let initiate = IBatchSettlement::initiateWithdrawCall {
        config: c.clone(),
        amount: 900_000,
    }
    .abi_encode();
    assert!(
        dev.send(RECEIVER, initiate.clone()).await.is_err(),
        "only the payer"
    );
    dev.send(PAYER, initiate).await.expect("initiate");
    let finalize = IBatchSettlement::finalizeWithdrawCall { config: c.clone() }.abi_encode();
    assert!(dev.send(0, finalize.clone()).await.is_err(), "too early");
    let late = vec![claim(&c, 400_000, 400_000, PAYER)];
    let sig = sign(
        AUTHORIZER,
        batch::claim_batch_digest(CHAIN_ID, &entries(&late)),
    );
    dev.send(
        0,
        IBatchSettlement::claimWithSignatureCall {
            voucherClaims: late,
            authorizerSignature: sig,
        }
        .abi_encode(),
    )
    .await
    .expect("claim during the delay");
    dev.chain.advance(901).await;
    dev.send(0, finalize).await.expect("finalize");
    assert_eq!(dev.channel(&c).await, (400_000, 400_000));
    assert_eq!(
        dev.chain.balance(address(PAYER)).await,
        payer_mid + 100_000 + 500_000
    );
    // What the contract holds is exactly the claimed-unsettled 150000.
    assert_eq!(dev.chain.balance(SETTLEMENT_ADDRESS).await, 150_000);
}

#[tokio::test]
async fn one_claim_transaction_covers_many_channels() {
    let dev = Dev {
        chain: Chain::start(),
    };
    // Ten channels of two payers, each with a deposit, claimed in one transaction.
    let configs: Vec<ChannelConfig> = (0..10u8)
        .map(|i| config(if i % 2 == 0 { PAYER } else { OTHER_PAYER }, 100 + i))
        .collect();
    for (i, c) in configs.iter().enumerate() {
        let key = if i % 2 == 0 { PAYER } else { OTHER_PAYER };
        let call = deposit_call(c, key, 10_000, 1000 + i as u64);
        dev.send(0, call).await.expect("deposit");
    }
    let claims: Vec<_> = configs
        .iter()
        .map(|c| {
            let key = if c.payer == address(PAYER) {
                PAYER
            } else {
                OTHER_PAYER
            };
            claim(c, 7_000, 6_000, key)
        })
        .collect();
    let sig = sign(
        AUTHORIZER,
        batch::claim_batch_digest(CHAIN_ID, &entries(&claims)),
    );
    let gas = dev
        .send(
            0,
            IBatchSettlement::claimWithSignatureCall {
                voucherClaims: claims,
                authorizerSignature: sig,
            }
            .abi_encode(),
        )
        .await
        .expect("batch claim");
    for c in &configs {
        assert_eq!(dev.channel(c).await, (10_000, 6_000));
    }
    let pool = dev
        .view(IBatchSettlement::receiversCall {
            receiver: address(RECEIVER),
            token: USDC.parse().unwrap(),
        })
        .await;
    assert_eq!(pool.totalClaimed, 60_000);
    eprintln!("claim of 10 channels in one transaction: {gas} gas");
}
