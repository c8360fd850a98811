//! Channels, continued: forged and out-of-step payments, `paygate pay`, a public tool, a streamed usage charge, a smart wallet, another server through the facilitator API.

use super::*;

/// Payments the official clients never send, each answered with the scheme's reason, nothing
/// charged and nothing forwarded; the channel keeps working between and after them.
#[tokio::test]
async fn forged_replayed_and_out_of_step_payments_change_nothing() {
    let (chain, gw, upstream, key) = setup().await;
    let payer = HandPayer::new(2, &channel_offer(&gw).await, 1);
    let pay = |payload: Value| send_payment(&gw, payer.header(payload));
    let refused = |(status, body): (u16, Value), reason: &str| {
        assert_eq!(status, 402, "{body}");
        assert_eq!(
            body["error"],
            format!("invalid_batch_settlement_evm_{reason}"),
            "{body}"
        );
    };
    let price = u128::from(PRICE);
    let balance_before = chain.balance(address(2)).await;

    // A deposit signed by someone else: refused before anything is sent; nothing is kept.
    let forged = channel::deposit(&payer.config, 3, 2 * PRICE, 1);
    refused(
        pay(payer.deposit(&forged, price)).await,
        "receive_authorization_signature",
    );
    assert_eq!(channels(&gw, &key).await["channels"], json!([]));
    // A voucher for a channel never opened: nothing on chain covers it.
    refused(
        pay(payer.voucher(price)).await,
        "cumulative_exceeds_balance",
    );

    // The real deposit of two prices, with the first voucher.
    let d = channel::deposit(&payer.config, 2, 2 * PRICE, 1);
    let (status, body) = pay(payer.deposit(&d, price)).await;
    assert_eq!(status, 200, "{body}");
    // The same authorization again (a replay): the chain refuses the transfer.
    refused(pay(payer.deposit(&d, 2 * price)).await, "deposit_failed");
    assert_eq!(chain.balance(address(2)).await, balance_before - 2 * PRICE);

    // A voucher signed by another key.
    let forged = HandPayer::voucher_payload(&payer.config, 2 * price, 3);
    refused(pay(forged).await, "voucher_signature");
    // The voucher of another channel under this channel's configuration.
    let mut other = payer.config.clone();
    other.salt = B256::repeat_byte(2);
    let mut mixed = payer.voucher(2 * price);
    mixed["voucher"] = HandPayer::voucher_of(&other, 2 * price, 2);
    refused(pay(mixed).await, "channel_id_mismatch");
    // A channel paying another receiver.
    let mut elsewhere = payer.config.clone();
    elsewhere.receiver = address(8);
    refused(
        pay(HandPayer::voucher_payload(&elsewhere, 2 * price, 2)).await,
        "receiver_mismatch",
    );
    // Skipping a step, repeating one: the corrective 402 says where the channel is.
    for max in [3 * price, price] {
        let (status, body) = pay(payer.voucher(max)).await;
        refused((status, body.clone()), "cumulative_amount_mismatch");
        let state = &body["accepts"][1]["extra"]["channelState"];
        assert_eq!(
            state["chargedCumulativeAmount"],
            PRICE.to_string(),
            "{body}"
        );
    }
    // Not a channel payload at all.
    refused(pay(json!({"type": "voucher"})).await, "payload_type");

    // The next step is served; the one after it is above the balance.
    let (status, body) = pay(payer.voucher(2 * price)).await;
    assert_eq!(status, 200, "{body}");
    refused(
        pay(payer.voucher(3 * price)).await,
        "cumulative_exceeds_balance",
    );
    let c = channel_of(&gw, &key, 2).await;
    assert_eq!(
        (
            c["charged"].as_str(),
            c["requests"].as_u64(),
            c["balance"].as_str()
        ),
        (
            Some(&*(2 * PRICE).to_string()),
            Some(2),
            Some(&*(2 * PRICE).to_string())
        ),
        "{c}"
    );
    assert_eq!(
        upstream.hits(),
        2,
        "only the two paid requests reached the origin"
    );
}

/// `paygate pay --channel`: the first call opens the channel with a deposit; the next ones, new
/// processes knowing nothing, learn the channel's state from the gateway and pay by voucher.
#[tokio::test]
async fn paygate_pay_opens_and_uses_a_channel() {
    let (chain, gw, upstream, key) = setup().await;
    let url = gw.url("/gateway/acme/search");
    let before = chain.balance(address(1)).await;
    for i in 0..3u64 {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_paygate"))
            .args(["pay", &url, "--channel", "--deposit-usd", "0.01", "--json"])
            .env("PAYGATE_PAYER_KEY", KEYS[1])
            .output()
            .await
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["status"], 200, "{doc}");
        assert_eq!(doc["paid"]["depositUSD"].is_string(), i == 0, "{doc}");
        assert_eq!(
            doc["receipt"]["extra"]["channelState"]["chargedCumulativeAmount"],
            ((i + 1) * PRICE).to_string(),
            "{doc}"
        );
    }
    assert_eq!(
        chain.balance(address(1)).await,
        before - 10_000,
        "one deposit"
    );
    let c = channel_of(&gw, &key, 1).await;
    assert_eq!(
        (c["charged"].as_str(), c["requests"].as_u64()),
        (Some(&*(3 * PRICE).to_string()), Some(3)),
        "{c}"
    );
    assert_eq!(upstream.hits(), 3);
}

/// Issue 52 (found by the money model): a channel the gateway finds on chain alone (its
/// deposit's request cut by a crash before its record was written, or opened elsewhere) is
/// charged for the vouchers it serves: its record is created by the first one, and the seller
/// claims them. Before, the first voucher was served and its charge never committed.
#[tokio::test]
async fn a_channel_found_on_chain_alone_is_charged_for_what_it_serves() {
    let (chain, gw, upstream, key) = setup().await;
    let payer = HandPayer::new(2, &channel_offer(&gw).await, 3);
    let deposit = channel::deposit(&payer.config, 2, 5 * PRICE, 9);
    let call = paygate_x402::batch::deposit_call(&payer.config, &deposit);
    chain
        .send(4, SETTLEMENT_ADDRESS, call.abi_encode())
        .await
        .expect("a deposit sent to the contract directly");
    assert_eq!(channels(&gw, &key).await["channels"], json!([]));
    let price = u128::from(PRICE);
    for step in 1..=2u128 {
        let (status, body) = send_payment(&gw, payer.header(payer.voucher(step * price))).await;
        assert_eq!(status, 200, "{body}");
    }
    let c = channel_of(&gw, &key, 2).await;
    assert_eq!(
        (c["charged"].as_str(), c["requests"].as_u64()),
        (Some(&*(2 * PRICE).to_string()), Some(2)),
        "{c}"
    );
    assert_eq!(upstream.hits(), 2);
    let seller = chain.balance(address(9)).await;
    let r = gw
        .api(&key, Method::POST, "/api/channels/claim", None)
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(chain.balance(address(9)).await, seller + 2 * PRICE);
}

/// A tool call at the caller-pays MCP endpoint paid from a channel (x402's MCP transport): the
/// tool's requirements list the channel offer; a deposit, then a voucher, each answer carrying
/// the receipt; a voucher out of step is a tool error whose requirements carry the channel's
/// state (the caller resyncs from it) and nothing reaches the origin.
#[tokio::test]
async fn a_public_tool_call_is_paid_from_a_channel() {
    let (_chain, gw, upstream, key) = setup().await;
    gw.create_route(
        &key,
        json!({"path": "lookup", "priceUSD": "0.001", "network": "base-sepolia",
               "targetUrl": format!("{}/lookup", upstream.url), "publicTool": true,
               "schemes": ["exact", "batch-settlement"]}),
    )
    .await;
    let call = |payment: Option<Value>| {
        let mut params = json!({"name": "lookup", "arguments": {}});
        if let Some(p) = payment {
            params["_meta"] = json!({ "x402/payment": p });
        }
        let gw = &gw;
        async move { common::mcp_x402_rpc(gw, "acme", "tools/call", params).await }
    };
    let unpaid = call(None).await;
    assert_eq!(unpaid["isError"], true, "{unpaid}");
    let accepts = &unpaid["structuredContent"]["accepts"];
    assert_eq!(accepts[1]["scheme"], "batch-settlement", "{unpaid}");
    let payer = HandPayer::new(6, &accepts[1], 7);
    let price = u128::from(PRICE);
    let payment = |payload: Value| json!({"x402Version": 2, "accepted": accepts[1].clone(), "payload": payload});
    let receipt = |r: &Value| r["_meta"]["x402/payment-response"].clone();

    let d = channel::deposit(&payer.config, 6, 3 * PRICE, 1);
    let opened = call(Some(payment(payer.deposit(&d, price)))).await;
    assert_eq!(opened["isError"], false, "{opened}");
    assert_eq!(
        receipt(&opened)["extra"]["chargedAmount"],
        PRICE.to_string()
    );
    let served = call(Some(payment(payer.voucher(2 * price)))).await;
    assert_eq!(served["isError"], false, "{served}");
    assert_eq!(
        receipt(&served)["extra"]["channelState"]["chargedCumulativeAmount"],
        (2 * PRICE).to_string(),
        "{served}"
    );
    assert_eq!(upstream.hits(), 2);

    // Out of step: the requirements say where the channel is; nothing is forwarded.
    let skipped = call(Some(payment(payer.voucher(4 * price)))).await;
    assert_eq!(skipped["isError"], true, "{skipped}");
    let doc = &skipped["structuredContent"];
    assert_eq!(
        doc["error"], "invalid_batch_settlement_evm_cumulative_amount_mismatch",
        "{skipped}"
    );
    assert_eq!(
        doc["accepts"][1]["extra"]["channelState"]["chargedCumulativeAmount"],
        (2 * PRICE).to_string(),
        "{skipped}"
    );
    assert_eq!(doc["x402/payment-response"]["success"], false, "{skipped}");
    assert_eq!(upstream.hits(), 2);
    let resynced = call(Some(payment(payer.voucher(3 * price)))).await;
    assert_eq!(resynced["isError"], false, "{resynced}");
    let c = channel_of(&gw, &key, 6).await;
    assert_eq!(
        (c["charged"].as_str(), c["requests"].as_u64()),
        (Some("3000"), Some(3)),
        "{c}"
    );
}

/// A usage-priced streamed route whose origin states the charge in a trailer (reached over
/// HTTP/2, `upstream.http2_hosts`): each request is charged the trailer's amount once the whole
/// answer passed, the trailer never reaches the caller, and the client goes on (resyncing from
/// the corrective 402, since the receipt cannot travel in the answer's head).
#[tokio::test]
async fn a_streamed_answer_is_charged_what_its_trailer_states() {
    let (chain, gw, _upstream, key) =
        setup_with(&[("PAYGATE__UPSTREAM__HTTP2_HOSTS", r#"["127.0.0.1"]"#)]).await;
    let origin = common::upstream::trailer_origin().await;
    gw.create_route(
        &key,
        json!({"path": "tokens", "priceUSD": "0.001", "network": "base-sepolia",
               "targetUrl": format!("{origin}/tokens"), "streaming": true, "pricing": "usage",
               "schemes": ["batch-settlement"]}),
    )
    .await;
    let report = channel_pay_at(&gw, &chain, 3, "/gateway/acme/tokens", 3, None).await;
    assert_eq!(report["statuses"]["200"], 3, "{report}");
    assert_eq!(report["chargeHeaderSeen"], false, "{report}");
    // The last answer's charge is written once its stream has passed the gateway, which may be
    // just after the client read its end: polled for, up to a deadline.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let c = loop {
        let c = channel_of(&gw, &key, 3).await;
        if c["requests"].as_u64() == Some(3) || std::time::Instant::now() > deadline {
            break c;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(
        (c["charged"].as_str(), c["requests"].as_u64()),
        (Some("900"), Some(3)),
        "three answers at $0.0003 each: {c}"
    );
}

/// A smart wallet (EIP-1271) paying through a channel without a payer authorizer: the gateway
/// asks the wallet about its deposit and each voucher (its owner's key signs them, the wallet
/// accepts them), serves them, refuses a voucher the wallet does not accept with nothing
/// forwarded, and the claim (the contract checks the voucher through the wallet too) moves
/// exactly what was charged to the receiver.
#[tokio::test]
async fn a_smart_wallet_pays_through_a_channel() {
    use alloy_primitives::{Address, U256};
    let (chain, gw, upstream, key) = setup().await;
    // The wallet: its code at a fixed address, its owner (account 6) in slot 0, and USDC.
    let wallet: Address = "0x0000000000000000000000000000000000001271"
        .parse()
        .unwrap();
    chain.place_eip1271_wallet(wallet, address(6)).await;
    let usdc: Address = common::chain::USDC.parse().unwrap();
    let fund = transferCall {
        to: wallet,
        amount: U256::from(10 * PRICE),
    };
    chain.send(6, usdc, fund.abi_encode()).await.unwrap();
    let receiver_before = chain.balance(address(9)).await;

    let mut payer = HandPayer::new(6, &channel_offer(&gw).await, 5);
    (payer.config.payer, payer.config.payerAuthorizer) = (wallet, Address::ZERO);
    payer.channel.config = payer.config.clone();
    let pay = |payload: Value| send_payment(&gw, payer.header(payload));
    let price = u128::from(PRICE);
    // The deposit: the owner's key signs the wallet's ERC-3009 authorization and first voucher.
    let d = channel::deposit(&payer.config, 6, 3 * PRICE, 1);
    let (status, body) = pay(payer.deposit(&d, price)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(chain.balance(wallet).await, 7 * PRICE);
    let (status, body) = pay(HandPayer::voucher_payload(&payer.config, 2 * price, 6)).await;
    assert_eq!(status, 200, "{body}");
    // A voucher the wallet does not accept (another key): refused, nothing forwarded.
    let (status, body) = pay(HandPayer::voucher_payload(&payer.config, 3 * price, 3)).await;
    assert_eq!(status, 402, "{body}");
    assert_eq!(
        body["error"], "invalid_batch_settlement_evm_voucher_signature",
        "{body}"
    );
    assert_eq!(upstream.hits(), 2);
    let c = channel_of_payer(&gw, &key, wallet).await;
    assert_eq!(c["charged"], (2 * PRICE).to_string(), "{c}");
    // The claim goes through the contract's own EIP-1271 check of the voucher.
    let claimed = gw.claim_channels(&key).await;
    assert_eq!(claimed["claimedChannels"], 1, "{claimed}");
    assert_eq!(chain.balance(address(9)).await, receiver_before + 2 * PRICE);
}

/// A smart wallet not deployed yet paying through a channel: its deposit's authorization and
/// first voucher come ERC-6492-wrapped; the gateway asks the wallet its factory would deploy
/// (a simulated call), the relayer deploys it and sends the deposit with the inner signature;
/// later vouchers are plain EIP-1271, and the claim (through the contract's own check of the
/// kept voucher) moves exactly what was charged.
#[tokio::test]
async fn a_counterfactual_wallet_opens_a_channel() {
    use alloy_primitives::{Address, Bytes};
    let (chain, gw, upstream, key) = setup().await;
    let c = chain.counterfactual_wallet(address(6), 3).await;
    chain.send_usdc(6, c.address, 10 * PRICE).await;
    let receiver_before = chain.balance(address(9)).await;

    let mut payer = HandPayer::new(6, &channel_offer(&gw).await, 6);
    (payer.config.payer, payer.config.payerAuthorizer) = (c.address, Address::ZERO);
    payer.channel.config = payer.config.clone();
    let pay = |payload: Value| send_payment(&gw, payer.header(payload));
    let price = u128::from(PRICE);
    let wrapped = |payload: &mut Value, key: &str| {
        let plain: Bytes = payload["voucher"][key].as_str().unwrap().parse().unwrap();
        payload["voucher"][key] = c.wrap(&plain).to_string().into();
    };
    let mut d = channel::deposit(&payer.config, 6, 3 * PRICE, 1);
    d.signature = c.wrap(&d.signature);
    // Another key's first voucher under the wrapper: the wallet-to-be says no, nothing sent.
    let mut forged = payer.deposit(&d, price);
    forged["voucher"] = HandPayer::voucher_of(&payer.config, price, 5);
    wrapped(&mut forged, "signature");
    let (status, body) = pay(forged).await;
    assert_eq!(status, 402, "{body}");
    assert!(!chain.has_code(c.address).await);
    // Its owner's: deployed, deposited, served.
    let mut first = payer.deposit(&d, price);
    wrapped(&mut first, "signature");
    let (status, body) = pay(first).await;
    assert_eq!(status, 200, "{body}\n{}", gw.log());
    assert!(chain.has_code(c.address).await, "deployed by its deposit");
    assert_eq!(chain.balance(c.address).await, 7 * PRICE);
    let (status, body) = pay(HandPayer::voucher_payload(&payer.config, 2 * price, 6)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(upstream.hits(), 2);
    let claimed = gw.claim_channels(&key).await;
    assert_eq!(claimed["claimedChannels"], 1, "{claimed}");
    assert_eq!(chain.balance(address(9)).await, receiver_before + 2 * PRICE);
}

/// Another x402 server settling its own channels through paygate's facilitator API (the
/// scheme's facilitator interface): its client's deposit verified and sent, vouchers checked
/// against the chain (within the balance, signed by the payer), then its own claim (signed by
/// its receiver authorizer), the settlement to its receiver and a cooperative refund, each
/// moving exactly its amount; a claim without its authorizer's signature is refused.
#[tokio::test]
async fn another_server_settles_its_channels_through_the_facilitator_api() {
    use alloy_primitives::U256;
    let (chain, gw, _upstream, key) = setup().await;
    // The other server's requirement: its receiver (8) and its own receiver authorizer (7).
    let mut requirement = channel_offer(&gw).await;
    requirement["payTo"] = json!(address(8).to_checksum(None));
    requirement["extra"]["receiverAuthorizer"] = json!(address(7).to_checksum(None));
    let payer = HandPayer::new(4, &requirement, 9);
    let call = |path: &'static str, payload: Value| {
        let body = json!({
            "x402Version": 2,
            "paymentPayload": {"x402Version": 2, "accepted": requirement.clone(), "payload": payload},
            "paymentRequirements": requirement.clone(),
        });
        let (gw, key) = (&gw, &key);
        async move {
            let r = gw.api(key, Method::POST, path, Some(body)).await;
            assert_eq!(r.status(), 200, "{path}");
            r.json::<Value>().await.unwrap()
        }
    };
    let price = u128::from(PRICE);
    let before = (
        chain.balance(address(4)).await,
        chain.balance(address(8)).await,
    );

    let d = channel::deposit(&payer.config, 4, 3 * PRICE, 1);
    let deposit = payer.deposit(&d, price);
    let v = call("/facilitator/verify", deposit.clone()).await;
    assert_eq!(
        (&v["isValid"], &v["extra"]["balance"]),
        (&json!(true), &json!("0")),
        "{v}"
    );
    let s = call("/facilitator/settle", deposit).await;
    assert_eq!(s["success"], true, "{s}");
    assert_eq!(s["amount"], (3 * PRICE).to_string(), "{s}");
    assert_eq!(
        s["extra"]["channelState"]["balance"],
        (3 * PRICE).to_string()
    );
    assert_eq!(chain.balance(address(4)).await, before.0 - 3 * PRICE);

    let v = call("/facilitator/verify", payer.voucher(2 * price)).await;
    assert_eq!(v["isValid"], true, "{v}");
    let v = call("/facilitator/verify", payer.voucher(4 * price)).await;
    assert_eq!(
        v["invalidReason"], "invalid_batch_settlement_evm_cumulative_exceeds_balance",
        "{v}"
    );
    let forged = HandPayer::voucher_payload(&payer.config, 2 * price, 3);
    let v = call("/facilitator/verify", forged).await;
    assert_eq!(
        v["invalidReason"], "invalid_batch_settlement_evm_voucher_signature",
        "{v}"
    );
    assert_eq!(
        gw.api(&key, Method::GET, "/api/channels", None)
            .await
            .json::<Value>()
            .await
            .unwrap()["channels"],
        json!([]),
        "nothing of paygate's own"
    );

    // The server claims what it served (2 prices), signed by its own authorizer.
    let id = payer.channel.id();
    let entry = paygate_x402::batch::ClaimEntry {
        channelId: id,
        maxClaimableAmount: 2 * price,
        totalClaimed: 2 * price,
    };
    let claim_sig = channel::sign(
        7,
        paygate_x402::batch::claim_batch_digest(channel::CHAIN_ID, &[entry]),
    );
    let claims = json!([{
        "voucher": {"channel": paygate_x402::batch::ChannelConfigWire::from(&payer.config),
                    "maxClaimableAmount": (2 * PRICE).to_string()},
        "signature": payer.voucher(2 * price)["voucher"]["signature"],
        "totalClaimed": (2 * PRICE).to_string(),
    }]);
    let s = call(
        "/facilitator/settle",
        json!({"type": "claim", "claims": claims}),
    )
    .await;
    assert_eq!(
        s["errorReason"], "invalid_batch_settlement_evm_claim_payload",
        "no authorizer signature: {s}"
    );
    let s = call(
        "/facilitator/settle",
        json!({"type": "claim", "claims": claims, "claimAuthorizerSignature": claim_sig.to_string()}),
    )
    .await;
    assert_eq!(
        (&s["success"], &s["amount"]),
        (&json!(true), &json!("")),
        "{s}"
    );
    let s = call(
        "/facilitator/settle",
        json!({"type": "settle", "receiver": address(8).to_checksum(None),
               "token": common::chain::USDC}),
    )
    .await;
    assert_eq!(s["amount"], (2 * PRICE).to_string(), "{s}");
    assert_eq!(chain.balance(address(8)).await, before.1 + 2 * PRICE);

    // The rest back to the payer, under the contract's refund nonce, signed by the server.
    let refund_sig = channel::sign(
        7,
        paygate_x402::batch::refund_digest(channel::CHAIN_ID, id, U256::ZERO, price),
    );
    let refund = json!({"type": "refund",
        "channelConfig": paygate_x402::batch::ChannelConfigWire::from(&payer.config),
        "amount": PRICE.to_string(), "refundNonce": "0",
        "refundAuthorizerSignature": refund_sig.to_string()});
    let s = call("/facilitator/settle", refund.clone()).await;
    assert_eq!(s["success"], true, "{s}");
    assert_eq!(s["extra"]["channelState"]["refundNonce"], "1", "{s}");
    assert_eq!(chain.balance(address(4)).await, before.0 - 2 * PRICE);
    // The same signed refund again: the nonce moved on, the contract refuses it.
    let s = call("/facilitator/settle", refund.clone()).await;
    assert_eq!(
        s["errorReason"], "invalid_batch_settlement_evm_refund_transaction_failed",
        "{s}"
    );
}

/// `/facilitator/supported` lists every kind `/facilitator/verify` and `/settle` take: `exact` in
/// both versions and, where this deployment serves channels, `batch-settlement` (v2 only); `upto`
/// and `auth-capture` with the terms a requirement must carry.
#[tokio::test]
async fn supported_lists_every_kind_the_facilitator_endpoints_take() {
    let (_chain, gw, _upstream, _key) = setup().await;
    let r = gw.get("/facilitator/supported").await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    let kinds = body["kinds"].as_array().unwrap();
    for kind in [
        json!({"x402Version": 1, "scheme": "exact", "network": "base-sepolia"}),
        json!({"x402Version": 2, "scheme": "exact", "network": "eip155:84532"}),
        json!({"x402Version": 2, "scheme": "batch-settlement", "network": "eip155:84532"}),
    ] {
        assert!(kinds.contains(&kind), "{kind} missing from {body}");
    }
    assert!(
        !kinds
            .iter()
            .any(|k| k["scheme"] == "batch-settlement" && k["x402Version"] == 1),
        "batch-settlement is a v2 scheme: {body}"
    );
    // `upto` and `auth-capture` name the deployment's operator (`facilitator_ways.rs`).
    for scheme in ["upto", "auth-capture"] {
        let kind = kinds.iter().find(|k| k["scheme"] == scheme);
        assert!(kind.is_some_and(|k| k["extra"].is_object()), "{body}");
    }
    // It submits a Permit2 payer's permit with the settlement (gas sponsoring).
    assert_eq!(
        body["extensions"],
        json!(["eip2612GasSponsoring"]),
        "{body}"
    );
}
