//! The harness's calls into a running gateway: admin, management and provider APIs.

use super::{Gateway, ADMIN_TOKEN};
use reqwest::Response;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

impl Gateway {
    /// `/metrics` as a scraper holding `token` reads it.
    pub async fn prometheus(&self, token: &str) -> String {
        let r = self
            .http
            .get(self.url("/metrics"))
            .bearer_auth(token)
            .send();
        let r = r.await.expect("GET /metrics");
        assert_eq!(r.status(), 200, "GET /metrics");
        r.text().await.expect("metrics text")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub async fn admin(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Response {
        let mut r = self
            .http
            .request(method, self.url(path))
            .bearer_auth(ADMIN_TOKEN);
        if let Some(b) = body {
            r = r.json(&b);
        }
        r.send().await.expect("admin request")
    }

    /// The payments of the organisation whose API key is `key`, newest first.
    pub async fn payments(&self, key: &str) -> Vec<Value> {
        let list: Value = self
            .api(key, reqwest::Method::GET, "/api/payments", None)
            .await
            .json()
            .await
            .expect("payments JSON");
        list["payments"].as_array().cloned().unwrap_or_default()
    }

    /// Creates an organisation with a receiver wallet; returns `(org json, api key)`.
    pub async fn create_org(&self, slug: &str, wallet: Option<&str>) -> (Value, String) {
        let mut body = json!({ "slug": slug });
        if let Some(w) = wallet {
            body["receiverWallet"] = json!(w);
        }
        let r = self
            .admin(reqwest::Method::POST, "/admin/orgs", Some(body))
            .await;
        assert_eq!(r.status(), 201, "create org {slug}");
        let v: Value = r.json().await.expect("json");
        let key = v["apiKey"].as_str().expect("apiKey").to_string();
        (v, key)
    }

    /// The organisation's latest payment (key `key`) once its `status` is `status`, polled for
    /// up to `secs` (reconciliation records it in the background).
    pub async fn latest_payment_when(&self, key: &str, status: &str, secs: u64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let r = self.api(key, reqwest::Method::GET, "/api/payments?limit=1", None);
            let list: Value = r.await.json().await.expect("payments JSON");
            let p = list["payments"][0].clone();
            if p["status"] == status {
                return p;
            }
            assert!(Instant::now() < deadline, "{list}\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub async fn api(
        &self,
        key: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Response {
        let mut r = self.http.request(method, self.url(path)).bearer_auth(key);
        if let Some(b) = body {
            r = r.json(&b);
        }
        r.send().await.expect("api request")
    }

    pub async fn create_route(&self, key: &str, body: Value) -> Value {
        let r = self
            .api(
                key,
                reqwest::Method::POST,
                "/api/routes",
                Some(body.clone()),
            )
            .await;
        assert_eq!(r.status(), 201, "create route {body}");
        r.json().await.expect("json")
    }

    /// A $0.01 route on base-sepolia to `target`.
    pub async fn create_paid_route(&self, key: &str, path: &str, target: &str, streaming: bool) {
        self.create_route(
            key,
            json!({"path": path, "priceUSD": 0.01, "targetUrl": target,
                   "network": "base-sepolia", "streaming": streaming}),
        )
        .await;
    }

    /// `POST /api/channels/claim` as the key's organisation, which must answer 200 (the node's
    /// log in the failure); its answer (`claimedChannels`).
    pub async fn claim_channels(&self, key: &str) -> Value {
        let r = self
            .api(
                key,
                reqwest::Method::POST,
                "/api/channels/claim",
                Some(json!({})),
            )
            .await;
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        assert_eq!(status, 200, "claim: {text}\n{}", self.log());
        serde_json::from_str(&text).expect("claim answer")
    }

    /// `GET /api/gateway/metrics?window=...` as the key's organisation, which must answer 200.
    pub async fn org_metrics(&self, key: &str, window: &str) -> Value {
        let path = format!("/api/gateway/metrics?window={window}");
        let r = self.api(key, reqwest::Method::GET, &path, None).await;
        assert_eq!(r.status(), 200);
        r.json().await.expect("metrics")
    }

    /// The id of the key's route at `path` (`/echo`).
    pub async fn route_id(&self, key: &str, path: &str) -> String {
        let routes: Value = self
            .api(key, reqwest::Method::GET, "/api/routes", None)
            .await
            .json()
            .await
            .expect("routes");
        let found = routes
            .as_array()
            .expect("a list")
            .iter()
            .find(|r| r["path"] == path);
        found.expect("no such route")["id"]
            .as_str()
            .expect("an id")
            .to_string()
    }

    /// A corridor to `currency` for the key's organisation, KYC approved (ACTIVE); its id.
    pub async fn active_corridor(&self, key: &str, currency: &str) -> String {
        let r = self
            .api(
                key,
                reqwest::Method::POST,
                "/corridors",
                Some(json!({ "destCurrency": currency })),
            )
            .await;
        assert_eq!(r.status(), 201, "create corridor");
        let corridor: Value = r.json().await.expect("json");
        let id = corridor["id"].as_str().expect("id").to_string();
        let path = format!("/admin/corridors/{id}/approve-kyc");
        let r = self.admin(reqwest::Method::POST, &path, None).await;
        assert_eq!(r.status(), 200, "approve KYC");
        id
    }

    /// `POST /corridors/{corridor}/pay` with `body` under `idempotency_key`.
    pub async fn pay_corridor(
        &self,
        key: &str,
        corridor: &str,
        idempotency_key: &str,
        body: &Value,
    ) -> Response {
        self.http
            .post(self.url(&format!("/corridors/{corridor}/pay")))
            .bearer_auth(key)
            .header("Idempotency-Key", idempotency_key)
            .json(body)
            .send()
            .await
            .expect("pay")
    }

    /// Every payout this gateway's sandbox provider holds.
    pub async fn provider_payouts(&self) -> Vec<Value> {
        serde_json::from_value(self.provider_json("/v1/payouts").await).expect("payouts")
    }

    /// A `GET` of the sandbox provider's API: its JSON.
    pub async fn provider_json(&self, path: &str) -> Value {
        let sandbox = self.sandbox.as_deref().expect("a sandbox provider");
        self.http
            .get(format!("http://{sandbox}{path}"))
            .send()
            .await
            .expect("provider")
            .json()
            .await
            .expect("provider JSON")
    }

    /// Polls the corridor's payouts `ids` until each is `SETTLED` or `within` has passed;
    /// returns those that are not.
    pub async fn unsettled_payouts(
        &self,
        key: &str,
        corridor: &str,
        mut ids: Vec<String>,
        within: Duration,
    ) -> Vec<String> {
        let deadline = Instant::now() + within;
        while !ids.is_empty() && Instant::now() < deadline {
            let mut still = Vec::new();
            for id in ids {
                let path = format!("/corridors/{corridor}/payments/{id}");
                let r = self.api(key, reqwest::Method::GET, &path, None).await;
                let v: Value = r.json().await.unwrap_or_default();
                if v["status"] != "SETTLED" {
                    still.push(id);
                }
            }
            ids = still;
            if !ids.is_empty() {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
        ids
    }

    pub async fn get(&self, path: &str) -> Response {
        self.http.get(self.url(path)).send().await.expect("get")
    }
}
