//! Payouts delivered once: retries and a SIGKILL under one key, the provider's webhooks (verified, deduplicated, ordered; CPN's signed notifications) and real beneficiaries.

use super::*;

#[tokio::test]
async fn one_key_one_payout_under_retries_and_concurrency() {
    let e = start(&[]).await;
    let id = e.active_corridor("KES").await;
    let q = e.quote(&id, "25.5").await;
    let body = pay_body(&q, "Wanjiru K", "KE", "KES", "1234-5678-90");
    let first = e.pay(&id, "same", &body).await;
    assert_eq!(first.status(), 202);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first: Value = first.json().await.unwrap();
    let again = e.pay(&id, "same", &body).await;
    assert_eq!(again.status(), 202);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.json::<Value>().await.unwrap(), first);
    let mut changed = body.clone();
    changed["beneficiary"]["name"] = json!("Someone Else");
    let r = e.pay(&id, "same", &changed).await;
    assert_eq!(error_of(r).await.1, "DUPLICATE_REQUEST");

    // 50 concurrent requests with one fresh key: exactly one payout at the provider.
    let q = e.quote(&id, "10").await;
    let body = pay_body(&q, "Otieno", "KE", "KES", "12345678");
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let http = e.gw.http.clone();
            let url = e.gw.url(&format!("/corridors/{id}/pay"));
            let key = e.key.clone();
            let body = body.clone();
            tokio::spawn(async move {
                let r = http
                    .post(url)
                    .bearer_auth(key)
                    .header("Idempotency-Key", "burst")
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                let status = r.status().as_u16();
                (status, r.json::<Value>().await.unwrap())
            })
        })
        .collect();
    let mut ids = std::collections::HashSet::new();
    for t in tasks {
        let (status, v) = t.await.unwrap();
        match status {
            202 => {
                ids.insert(v["paymentId"].as_str().unwrap().to_string());
            }
            409 => assert_eq!(v["code"], "DUPLICATE_REQUEST", "{v}"),
            other => panic!("unexpected {other}: {v}"),
        }
    }
    assert!(ids.len() <= 1, "{ids:?}");
    let payouts = e.provider_payouts().await;
    assert_eq!(payouts.len(), 2, "{payouts:?}");
    // The key now answers with its one payment.
    let r = e.pay(&id, "burst", &body).await;
    assert_eq!(r.status(), 202);
    let pid = r.json::<Value>().await.unwrap()["paymentId"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(ids.is_empty() || ids.contains(&pid));
}

/// Kills paygate with SIGKILL while the provider call is in progress (before the provider
/// recorded the payout, or after it recorded it but before paygate heard back), restarts it and
/// retries as a client would: one payout, never two.
#[tokio::test]
async fn sigkill_mid_payout_then_retry_pays_once() {
    for delay in [
        "PAYGATE__PAYOUT__SANDBOX__ACCEPT_DELAY_MS",
        "PAYGATE__PAYOUT__SANDBOX__ANSWER_DELAY_MS",
    ] {
        let mut e = start(&[(delay, "3000")]).await;
        let id = e.active_corridor("ZAR").await;
        let q = e.quote(&id, "40").await;
        let body = pay_body(&q, "Thandi M", "ZA", "ZAR", "123 456 7890");
        let http = e.gw.http.clone();
        let url = e.gw.url(&format!("/corridors/{id}/pay"));
        let key = e.key.clone();
        let b = body.clone();
        let inflight = tokio::spawn(async move {
            http.post(url)
                .bearer_auth(key)
                .header("Idempotency-Key", "crash-key")
                .json(&b)
                .send()
                .await
        });
        // The key and payout are reserved at once; the provider is slow: kill once the
        // reservation is logged (it is durable before the log line).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !e.gw.log().contains("payout reserved") {
            assert!(tokio::time::Instant::now() < deadline, "{}", e.gw.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        e.gw.kill();
        assert!(
            inflight.await.unwrap().is_err(),
            "the request died with the process"
        );
        let mut env: Vec<(String, String)> = vec![
            (
                "PAYGATE__PAYOUT__SANDBOX__LISTEN".into(),
                e.sandbox.trim_start_matches("http://").into(),
            ),
            ("PAYGATE_WEBHOOK_SECRETS".into(), SECRETS.into()),
            (
                "PAYGATE__PAYOUT__SANDBOX__WEBHOOK_DELAY_MS".into(),
                "100".into(),
            ),
            (
                "PAYGATE__PAYOUT__RECONCILE_INTERVAL_SECONDS".into(),
                "1".into(),
            ),
        ];
        env.push((delay.into(), "0".into()));
        e.gw.set_env(env);
        e.gw.restart().await;
        // The client retries until it gets its answer.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        let answer = loop {
            let r = e.pay(&id, "crash-key", &body).await;
            if r.status() == 202 {
                break r.json::<Value>().await.unwrap();
            }
            assert_eq!(r.status(), 409, "{delay}: {}", r.text().await.unwrap());
            assert!(tokio::time::Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let payouts = e.provider_payouts().await;
        assert_eq!(payouts.len(), 1, "{delay}: {payouts:?}");
        assert_eq!(payouts[0]["id"], answer["cpnPaymentId"]);
        assert_eq!(payouts[0]["reference"], answer["paymentId"]);
        let pid = answer["paymentId"].as_str().unwrap();
        e.wait_status(&id, pid, "SETTLED").await;
    }
}

#[tokio::test]
async fn webhooks_are_verified_deduplicated_and_ordered_by_the_state_machine() {
    // The sandbox's own webhooks are held back: this test plays the provider.
    let e = start(&[("PAYGATE__PAYOUT__SANDBOX__WEBHOOK_DELAY_MS", "600000")]).await;
    let id = e.active_corridor("BRL").await;
    let mut payments = vec![];
    for i in 0..2 {
        let q = e.quote(&id, "20").await;
        let r = e.pay(&id, &format!("wh-{i}"), &brl(&q, "Ana")).await;
        assert_eq!(r.status(), 202);
        payments.push(r.json::<Value>().await.unwrap());
    }
    let (a, b) = (&payments[0], &payments[1]);
    let cpn_a = a["cpnPaymentId"].as_str().unwrap();
    let pid_a = a["paymentId"].as_str().unwrap();
    let completed = event("payments.payment_completed", cpn_a);
    let now = paygate_domain::unix_now();
    let ts = |secret: &str, body: &[u8], t: u64| {
        let mut m = format!("{t}.").into_bytes();
        m.extend_from_slice(body);
        format!("t={t},v1={}", hmac_hex(secret, &m))
    };
    let mut tampered = completed.clone();
    let pos = tampered.iter().position(|c| *c == b'1').unwrap();
    tampered[pos] = b'9';
    // Forgeries: 401 and nothing changes.
    for (sig, body) in [
        (None, completed.clone()),
        (Some(hmac_hex("first-test-secret", &completed)), tampered),
        (
            Some(hmac_hex("not-the-secret", &completed)),
            completed.clone(),
        ),
        (
            Some(ts("first-test-secret", &completed, now - 400)),
            completed.clone(),
        ),
        (Some("t=1,v1=zz".to_string()), completed.clone()),
    ] {
        let (status, _) = post_webhook(&e, sig.clone(), &body).await;
        assert_eq!(status, 401, "{sig:?}");
    }
    assert_eq!(e.payment(&id, pid_a).await["status"], "PENDING");

    // Completed first (rotated second secret, timestamped form), then a late hold and a failure:
    // SETTLED is terminal.
    let (s, v) = post_webhook(
        &e,
        Some(ts("second-test-secret", &completed, now)),
        &completed,
    )
    .await;
    assert_eq!((s, v["status"].as_str()), (200, Some("applied")));
    let (s, v) = post_webhook(
        &e,
        Some(hmac_hex("first-test-secret", &completed)),
        &completed,
    )
    .await;
    assert_eq!((s, v["status"].as_str()), (200, Some("duplicate")));
    for kind in ["payments.compliance_hold", "payments.payment_failed"] {
        let body = event(kind, cpn_a);
        let (s, v) = post_webhook(&e, Some(hmac_hex("first-test-secret", &body)), &body).await;
        assert_eq!((s, v["status"].as_str()), (200, Some("ignored")), "{kind}");
    }
    let rec = e.payment(&id, pid_a).await;
    assert_eq!(rec["status"], "SETTLED");
    assert_eq!(rec["lastEvent"]["eventType"], "payments.payment_completed");

    // Hold, hold again, then failed: COMPLIANCE_HOLD -> FAILED.
    let cpn_b = b["cpnPaymentId"].as_str().unwrap();
    let pid_b = b["paymentId"].as_str().unwrap();
    let hold = event("payments.compliance_hold", cpn_b);
    let sig = hmac_hex("first-test-secret", &hold);
    assert_eq!(post_webhook(&e, Some(sig.clone()), &hold).await.0, 200);
    assert_eq!(e.payment(&id, pid_b).await["status"], "COMPLIANCE_HOLD");
    assert_eq!(
        post_webhook(&e, Some(sig), &hold).await.1["status"],
        "duplicate"
    );
    let failed = event("payments.payment_failed", cpn_b);
    let (s, _) = post_webhook(&e, Some(hmac_hex("first-test-secret", &failed)), &failed).await;
    assert_eq!(s, 200);
    let failed = e.payment(&id, pid_b).await;
    assert_eq!(failed["status"], "FAILED");
    // The reason comes with it, from the provider's event.
    assert_eq!(failed["failureCode"], "X", "{failed}");
    assert!(failed["failureMessage"]
        .as_str()
        .unwrap()
        .contains("2026-11-22T10:00:00Z"));
    // A settled payout has no reason, even after a late failure event (ignored).
    assert_eq!(e.payment(&id, pid_a).await["failureCode"], Value::Null);

    // Signed but malformed: 400. Unknown payment: kept, 202.
    let bad = br#"{"type":"payments.payment_completed"}"#;
    assert_eq!(
        post_webhook(&e, Some(hmac_hex("first-test-secret", bad)), bad)
            .await
            .0,
        400
    );
    let unknown = event("payments.payment_completed", "cpn_unknown");
    let (s, v) = post_webhook(&e, Some(hmac_hex("first-test-secret", &unknown)), &unknown).await;
    assert_eq!((s, v["status"].as_str()), (202, Some("kept")));
}

/// An event that arrives before paygate recorded the provider's id is kept, then applied once
/// the payout is known.
#[tokio::test]
async fn early_webhook_is_kept_then_applied() {
    let e = start(&[
        ("PAYGATE__PAYOUT__SANDBOX__WEBHOOK_DELAY_MS", "600000"),
        ("PAYGATE__PAYOUT__SANDBOX__ANSWER_DELAY_MS", "2000"),
    ])
    .await;
    let id = e.active_corridor("MXN").await;
    let q = e.quote(&id, "30").await;
    let body = pay_body(&q, "Luis P", "MX", "MXN", "0321 8000 0118 3597 19");
    let http = e.gw.http.clone();
    let url = e.gw.url(&format!("/corridors/{id}/pay"));
    let key = e.key.clone();
    let pending = tokio::spawn(async move {
        http.post(url)
            .bearer_auth(key)
            .header("Idempotency-Key", "early")
            .json(&body)
            .send()
            .await
            .unwrap()
    });
    // The provider has recorded the payout but paygate has not heard back yet.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let cpn = loop {
        if let Some(p) = e.provider_payouts().await.first() {
            break p["id"].as_str().unwrap().to_string();
        }
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let completed = event("payments.payment_completed", &cpn);
    let (s, _) = post_webhook(
        &e,
        Some(hmac_hex("first-test-secret", &completed)),
        &completed,
    )
    .await;
    assert_eq!(s, 202);
    let r = pending.await.unwrap();
    assert_eq!(r.status(), 202);
    let pid = r.json::<Value>().await.unwrap()["paymentId"]
        .as_str()
        .unwrap()
        .to_string();
    e.wait_status(&id, &pid, "SETTLED").await;
}

/// The sandbox signing as CPN does (`webhook_signing = "circle"`): its ECDSA-signed
/// notifications, checked against the key paygate fetches by id from the provider, take payouts
/// to each final state, a progress notification kept in the timeline and a failure's reason and
/// code on the payout; duplicated and reordered notifications (on cue) move nothing back;
/// notifications signed by anyone else are refused and change nothing.
#[tokio::test]
async fn cpn_signed_notifications_move_payouts_and_forgeries_are_refused() {
    let e = start(&[("PAYGATE__PAYOUT__SANDBOX__WEBHOOK_SIGNING", "circle")]).await;
    let id = e.active_corridor("BRL").await;
    let mut settled = None;
    let on_cue: [(&str, &[&str]); 2] = [
        ("Sandbox Duplicate", &["SETTLED"]),
        ("Sandbox Reorder", &["SETTLED"]),
    ];
    for (i, (name, path)) in OUTCOMES.into_iter().chain(on_cue).enumerate() {
        let (p, rec) = e.pay_through(&id, &format!("cpn-{i}"), name, path).await;
        let pid = p["paymentId"].as_str().unwrap().to_string();
        let kinds: Vec<&str> = rec["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|ev| ev["eventType"].as_str().unwrap())
            .collect();
        match name {
            "Ana Souza" => {
                assert_eq!(
                    kinds,
                    ["cpn.payment.fiatPaymentInitiated", "cpn.payment.completed"],
                    "{rec}"
                );
                assert_eq!(rec["events"][0]["providerStatus"], "FIAT_PAYMENT_INITIATED");
                settled = Some((pid, p["cpnPaymentId"].as_str().unwrap().to_string()));
            }
            "Sandbox Fail" => {
                assert_eq!(kinds, ["cpn.payment.failed"]);
                assert_eq!(rec["failureCode"], "PM02001", "{rec}");
                assert!(rec["failureMessage"]
                    .as_str()
                    .unwrap()
                    .contains("BANK_VERIFICATION_FAILED"));
            }
            "Sandbox Hold" => assert_eq!(
                kinds,
                [
                    "cpn.payment.inManualReview",
                    "cpn.payment.fiatPaymentInitiated",
                    "cpn.payment.completed"
                ]
            ),
            // Each notification delivered twice: the repeats (same notificationId) are
            // duplicates, kept once.
            "Sandbox Duplicate" => {
                wait_for_deliveries(&e).await;
                let rec = e.payment(&id, &pid).await;
                assert_eq!(rec["events"].as_array().unwrap().len(), 2, "{rec}");
            }
            // The hold that arrives after the completion moves nothing back.
            _ => {
                wait_for_deliveries(&e).await;
                let rec = e.payment(&id, &pid).await;
                assert_eq!(rec["status"], "SETTLED");
                assert_eq!(
                    rec["events"].as_array().unwrap().len(),
                    2,
                    "only the progress and the completion: {rec}"
                );
            }
        }
    }

    // Forgeries against the settled payout: a key the provider does not know, a key id that is
    // not a UUID, a missing signature, a signature that is not base64.
    let (pid, cpn) = settled.unwrap();
    let body = paygate_payouts::cpn::payment_notification(
        "cpn.payment.failed",
        "b1f0c9de-0000-4000-8000-000000000001",
        &paygate_payouts::cpn::PaymentWire {
            id: cpn,
            status: "FAILED".into(),
            update_date: None,
            failure_reason: Some("OTHER".into()),
            failure_code: Some("PM00001".into()),
            source_amount: None,
            customer_ref_id: None,
            refund: None,
        },
        "2026-11-26T10:00:00Z",
    );
    let mine = p256::ecdsa::SigningKey::random(&mut rand::rngs::OsRng);
    let good_looking = circle_signature(&mine, &body);
    for (key_id, sig) in [
        (
            Some("7d8f0e2a-1b3c-4d5e-8f90-a1b2c3d4e5f6"),
            Some(good_looking.as_str()),
        ),
        (Some("../v1/payouts"), Some(good_looking.as_str())),
        (Some("7d8f0e2a-1b3c-4d5e-8f90-a1b2c3d4e5f6"), None),
        (None, Some(good_looking.as_str())),
        (
            Some("7d8f0e2a-1b3c-4d5e-8f90-a1b2c3d4e5f6"),
            Some("not base64!"),
        ),
    ] {
        let mut headers = vec![];
        headers.extend(key_id.map(|k| ("X-Circle-Key-Id", k)));
        headers.extend(sig.map(|s| ("X-Circle-Signature", s)));
        let (status, answer) = post_webhook_with(&e, &headers, &body).await;
        assert_eq!(
            (status, &answer["code"]),
            (401, &json!("UNAUTHORIZED")),
            "{key_id:?}"
        );
    }
    let rec = e.payment(&id, &pid).await;
    assert_eq!(rec["status"], "SETTLED");
    assert_eq!(rec["events"].as_array().unwrap().len(), 2);
}

/// A BRL payout to a PIX key and a KES one to an M-Pesa number: accepted without an account
/// number, kept canonical, shown masked with the key's kind.
#[tokio::test]
async fn payouts_to_a_pix_key_and_an_mpesa_number() {
    let e = start(&[]).await;
    for (currency, country, field, given, shown, kind) in [
        (
            "BRL",
            "BR",
            "pixKey",
            "529.982.247-25",
            "*******4725",
            Some("CPF"),
        ),
        (
            "KES",
            "KE",
            "mobileNumber",
            "0712 345 678",
            "*********5678",
            None,
        ),
    ] {
        let id = e.active_corridor(currency).await;
        let q = e.quote(&id, "20").await;
        let mut body = pay_body(&q, "Ana Souza", country, currency, "");
        let ben = body["beneficiary"].as_object_mut().unwrap();
        ben.remove("accountNumber");
        ben.insert(field.into(), json!(given));
        let r = e.pay(&id, &format!("alt-{currency}"), &body).await;
        assert_eq!(r.status(), 202, "{}", e.gw.log());
        let p: Value = r.json().await.unwrap();
        let rec = e
            .wait_status(&id, p["paymentId"].as_str().unwrap(), "SETTLED")
            .await;
        assert_eq!(rec["beneficiary"][field], shown, "{rec}");
        assert_eq!(rec["beneficiary"]["accountNumber"], "");
        assert_eq!(rec["beneficiary"]["pixKeyType"].as_str(), kind);
    }
    let held = e.provider_payouts().await;
    assert_eq!(held.len(), 2, "{held:?}");
}

/// CPN as a deployment configures it (`[payout.cpn] base_url`, `PAYGATE_CPN_API_KEY`): paygate
/// reads the provider's key from that base URL only, with the API key, once for many
/// notifications; a notification of a type it does not know is answered and kept (`202`), one
/// for a known payment moves it; the signature of another key is refused.
#[tokio::test]
async fn a_configured_cpn_provider_signs_notifications_paygate_checks_against_its_key() {
    let keys = KeyServer::start().await;
    let e = start(&[
        ("PAYGATE__PAYOUT__CPN__BASE_URL", keys.url.as_str()),
        ("PAYGATE_CPN_API_KEY", "cpn-test-api-key"),
        // The sandbox's own webhooks are held back: this test plays CPN.
        ("PAYGATE__PAYOUT__SANDBOX__WEBHOOK_DELAY_MS", "600000"),
    ])
    .await;
    let id = e.active_corridor("BRL").await;
    let q = e.quote(&id, "10").await;
    let r = e.pay(&id, "cpn-cfg-1", &brl(&q, "Ana Souza")).await;
    assert_eq!(r.status(), 202);
    let p: Value = r.json().await.unwrap();
    let (pid, cpn) = (
        p["paymentId"].as_str().unwrap(),
        p["cpnPaymentId"].as_str().unwrap().to_string(),
    );
    let (e, kid) = (&e, keys.key_id.as_str());
    let post = |body: Vec<u8>, sig: String| async move {
        let headers = [
            ("X-Circle-Key-Id", kid),
            ("X-Circle-Signature", sig.as_str()),
        ];
        post_webhook_with(e, &headers, &body).await.0
    };
    let payment = |status: &str| paygate_payouts::cpn::PaymentWire {
        id: cpn.clone(),
        status: status.into(),
        update_date: None,
        failure_reason: None,
        failure_code: None,
        source_amount: None,
        customer_ref_id: None,
        refund: None,
    };
    let at = "2026-11-26T10:00:00Z";
    // A notification type paygate does not know, naming no payment: answered, kept.
    let unknown =
        json!({"subscriptionId": "s", "notificationId": "0a1b2c3d-0000-4000-8000-000000000001",
        "notificationType": "cpn.transaction.broadcasted", "notification": {"level": 1},
        "timestamp": at, "version": 2})
        .to_string()
        .into_bytes();
    assert_eq!(post(unknown.clone(), keys.sign(&unknown)).await, 202);
    // Progress, then completion, for the payout.
    for (i, (kind, status, want)) in [
        (
            "cpn.payment.fiatPaymentInitiated",
            "FIAT_PAYMENT_INITIATED",
            "PENDING",
        ),
        ("cpn.payment.completed", "COMPLETED", "SETTLED"),
    ]
    .into_iter()
    .enumerate()
    {
        let body = paygate_payouts::cpn::payment_notification(
            kind,
            &format!("0a1b2c3d-0000-4000-8000-00000000001{i}"),
            &payment(status),
            at,
        );
        assert_eq!(post(body.clone(), keys.sign(&body)).await, 200, "{kind}");
        assert_eq!(e.payment(&id, pid).await["status"], want, "{kind}");
    }
    // Another key's signature under this key id: refused, nothing moves.
    let other = p256::ecdsa::SigningKey::random(&mut rand::rngs::OsRng);
    let late = paygate_payouts::cpn::payment_notification(
        "cpn.payment.failed",
        "0a1b2c3d-0000-4000-8000-000000000099",
        &payment("FAILED"),
        at,
    );
    let forged = circle_signature(&other, &late);
    assert_eq!(post(late, forged).await, 401);
    assert_eq!(e.payment(&id, pid).await["status"], "SETTLED");
    // The key was read once, with the API key, from the configured provider.
    assert_eq!(
        keys.asked.lock().unwrap().as_slice(),
        ["Bearer cpn-test-api-key"]
    );
}
