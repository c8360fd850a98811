//! A real local chain for tests: anvil (from the npm package) as chain 84532 with Circle's USDC
//! placed at the Base Sepolia address by `paygate devchain setup`, plus payment signing.
#![allow(dead_code)]

use alloy_primitives::{Address, B256, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use base64::Engine;
use paygate_x402::money::UsdcAmount;
use paygate_x402::network::{builtin_networks, Networks};
use paygate_x402::payment::SignedAuthorization;
use paygate_x402::verify::{signing_hash, token_domain};
use paygate_x402::PaymentRequirements;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

alloy_sol_types::sol! {
    /// The dev chain's wallet factory (`shared/contracts/src/Eip1271Wallet.sol`).
    function createWallet(address owner, bytes32 salt) external returns (address wallet);
    function walletAddress(address owner, bytes32 salt) external view returns (address);
}

/// A smart wallet not deployed yet: its address and how its factory deploys it.
#[derive(Debug, Clone)]
pub struct Counterfactual {
    pub address: Address,
    pub factory: Address,
    pub calldata: alloy_primitives::Bytes,
}

impl Counterfactual {
    /// `signature` (its owner's) wrapped as ERC-6492 for this wallet.
    pub fn wrap(&self, signature: &alloy_primitives::Bytes) -> alloy_primitives::Bytes {
        self.wrap_through(self.factory, signature)
    }

    /// [`Self::wrap`] naming another factory.
    pub fn wrap_through(
        &self,
        factory: Address,
        signature: &alloy_primitives::Bytes,
    ) -> alloy_primitives::Bytes {
        paygate_x402::signature::Counterfactual {
            factory,
            factory_calldata: self.calldata.clone(),
            signature: signature.clone(),
        }
        .wrap()
    }

    /// The script input naming it (`x402_permit2_pay.cjs`'s `factory`).
    pub fn script_input(&self) -> Value {
        json!({"address": self.factory.to_checksum(None), "data": self.calldata.to_string()})
    }
}

/// anvil's well-known development keys (mnemonic "test test ... junk").
pub const KEYS: [&str; 10] = [
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
    "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a",
    "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba",
    "0x92db14e403b83dfe3df233f83dfa3a0d7096f21ca9b0d6d6b8d88b2b4ec1564e",
    "0x4bbbf85ce3377467afe5d46f804f221813b2bb87f24d81f60f1fcdbf7cbf4356",
    "0xdbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97",
    "0x2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6",
];
pub const USDC: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";

pub fn signer(i: usize) -> PrivateKeySigner {
    KEYS[i].parse().expect("key")
}

pub fn address(i: usize) -> Address {
    signer(i).address()
}

/// `--contracts DIR` when the dev chain's compiled contracts are named (`make test` does), so
/// the batch-settlement contract sits at its canonical address.
fn contracts_arg() -> Vec<String> {
    match std::env::var("PAYGATE_TEST_CONTRACTS") {
        Ok(dir) => vec!["--contracts".into(), dir],
        Err(_) => Vec::new(),
    }
}

pub struct Chain {
    pub rpc: String,
    child: Child,
}

impl Chain {
    /// Starts anvil on a free port and sets up USDC, minting 1000 USDC to accounts 1..=6.
    pub fn start() -> Self {
        // Its RPC clients are reqwest with rustls: the process's crypto provider first.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let anvil = std::env::var("PAYGATE_TEST_ANVIL")
            .expect("PAYGATE_TEST_ANVIL must name the anvil binary (run via `make test`)");
        let artifacts = std::env::var("PAYGATE_TEST_USDC_ARTIFACTS").expect(
            "PAYGATE_TEST_USDC_ARTIFACTS must name stablecoin-evm's artifacts (run via `make test`)",
        );
        let mut child = Command::new(anvil)
            .args(["--host", "127.0.0.1", "--port", "0", "--chain-id", "84532"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn anvil");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let rpc = loop {
            let line = lines.next().expect("anvil exited").expect("read");
            if let Some(addr) = line.strip_prefix("Listening on ") {
                break format!("http://{}", addr.trim());
            }
        };
        // Keep draining anvil's output so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let mint_to: Vec<String> = (1..=6).map(|i| address(i).to_checksum(None)).collect();
        let out = Command::new(env!("CARGO_BIN_EXE_paygate"))
            .args([
                "devchain",
                "setup",
                "--rpc",
                &rpc,
                "--artifacts",
                &artifacts,
            ])
            .args(["--mint-to", &mint_to.join(",")])
            .args(contracts_arg())
            // Every test account may relay for the deployment-wide escrow operator.
            .args([
                "--operator-relayers",
                &(0..KEYS.len())
                    .map(|i| address(i).to_checksum(None))
                    .collect::<Vec<_>>()
                    .join(","),
            ])
            .env("PAYGATE_DEVCHAIN_DEPLOYER_KEY", KEYS[0])
            .output()
            .expect("run devchain setup");
        assert!(
            out.status.success(),
            "devchain setup failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self { rpc, child }
    }

    /// Environment for a gateway settling on this chain (relayer: account 0).
    pub fn gateway_env(&self) -> Vec<(String, String)> {
        vec![
            ("PAYGATE_RELAYER_KEY".into(), KEYS[0].into()),
            (
                "PAYGATE__NETWORKS__BASE-SEPOLIA__RPC_URL".into(),
                self.rpc.clone(),
            ),
            // Counterfactual wallets of the test factory are deployed when they first pay.
            (
                "PAYGATE__NETWORKS__BASE-SEPOLIA__SMART_WALLET_FACTORIES".into(),
                format!(
                    "[\"{}\"]",
                    paygate_x402::signature::DEV_WALLET_FACTORY_ADDRESS
                ),
            ),
        ]
    }

    /// [`Self::gateway_env`] with reconciliation every second (the crash harnesses: what a
    /// kill left open is decided within the test).
    pub fn reconciling_env(&self) -> Vec<(String, String)> {
        let mut env = self.gateway_env();
        env.push((
            "PAYGATE__FACILITATOR__RECONCILE_INTERVAL_SECONDS".into(),
            "1".into(),
        ));
        env
    }

    /// A provider sending as account `key`.
    pub fn provider(&self, key: usize) -> impl alloy_provider::Provider {
        alloy_provider::ProviderBuilder::new()
            .wallet(signer(key))
            .connect_http(self.rpc.parse().unwrap())
    }

    /// Sends `data` to `to` from account `key`; `Ok(gas used)` or the revert.
    pub async fn send(&self, key: usize, to: Address, data: Vec<u8>) -> Result<u64, String> {
        use alloy_network::TransactionBuilder;
        use alloy_provider::Provider;
        let p = self.provider(key);
        let tx = alloy_rpc_types_eth::TransactionRequest::default()
            .with_to(to)
            .with_input(data);
        // Estimating first turns a revert into an error instead of a mined failure.
        p.estimate_gas(tx.clone())
            .await
            .map_err(|e| e.to_string())?;
        let receipt = p
            .send_transaction(tx)
            .await
            .map_err(|e| e.to_string())?
            .get_receipt()
            .await
            .map_err(|e| e.to_string())?;
        if !receipt.status() {
            return Err("reverted".into());
        }
        Ok(receipt.gas_used)
    }

    /// Sends `amount` USDC base units from account `key` to `to`.
    pub async fn send_usdc(&self, key: usize, to: Address, amount: u64) {
        use alloy_sol_types::SolCall;
        alloy_sol_types::sol! {
            function transfer(address to, uint256 value) external returns (bool);
        }
        let data = transferCall {
            to,
            value: alloy_primitives::U256::from(amount),
        }
        .abi_encode();
        self.send(key, USDC.parse().unwrap(), data)
            .await
            .expect("USDC transfer");
    }

    /// Moves the chain's clock `secs` ahead (the next block's timestamp).
    pub async fn advance(&self, secs: u64) {
        use alloy_provider::Provider;
        let _: serde_json::Value = self
            .provider(0)
            .raw_request("evm_increaseTime".into(), (secs,))
            .await
            .expect("evm_increaseTime");
    }

    /// Places a copy of the contract at `from` at `to` (its code only, no storage).
    pub async fn copy_code(&self, from: Address, to: Address) {
        use alloy_provider::Provider;
        let p = self.provider(0);
        let code = p.get_code_at(from).await.expect("eth_getCode");
        assert!(!code.is_empty(), "no contract at {from}");
        let _: Value = p
            .raw_request("anvil_setCode".into(), (to, code))
            .await
            .expect("anvil_setCode");
    }

    /// Places the test smart wallet (`Eip1271Wallet`: accepts what `owner`'s key signed) at
    /// `at`; no tokens.
    pub async fn place_eip1271_wallet(&self, at: Address, owner: Address) {
        use alloy_provider::Provider;
        let dir = std::env::var("PAYGATE_TEST_CONTRACTS").expect(
            "PAYGATE_TEST_CONTRACTS must name the compiled contracts (run via `make test`)",
        );
        let artifact: Value = serde_json::from_str(
            &std::fs::read_to_string(std::path::Path::new(&dir).join("Eip1271Wallet.json"))
                .expect("Eip1271Wallet artifact"),
        )
        .expect("artifact JSON");
        let p = self.provider(0);
        let _: Value = p
            .raw_request(
                "anvil_setCode".into(),
                (at, artifact["deployedBytecode"].as_str().unwrap()),
            )
            .await
            .expect("anvil_setCode");
        let _: Value = p
            .raw_request(
                "anvil_setStorageAt".into(),
                (at, B256::ZERO, B256::left_padding_from(owner.as_slice())),
            )
            .await
            .expect("anvil_setStorageAt");
    }

    /// A counterfactual smart wallet of `owner` (ERC-6492): the address the dev chain's wallet
    /// factory deploys it to for `salt`, and the factory call that does.
    pub async fn counterfactual_wallet(&self, owner: Address, salt: u8) -> Counterfactual {
        use alloy_provider::Provider;
        use alloy_sol_types::SolCall;
        let factory = paygate_x402::signature::DEV_WALLET_FACTORY_ADDRESS;
        let salt = B256::repeat_byte(salt);
        let tx = alloy_rpc_types_eth::TransactionRequest::default()
            .to(factory)
            .input(walletAddressCall { owner, salt }.abi_encode().into());
        let out = self.provider(0).call(tx).await.expect("walletAddress");
        let address = walletAddressCall::abi_decode_returns(&out).expect("an address");
        Counterfactual {
            address,
            factory,
            calldata: createWalletCall { owner, salt }.abi_encode().into(),
        }
    }

    /// The view `call` of the contract at `to`, decoded.
    pub async fn view<C: alloy_sol_types::SolCall>(&self, to: Address, call: C) -> C::Return {
        use alloy_network::TransactionBuilder;
        use alloy_provider::Provider;
        let out = self
            .provider(0)
            .call(
                alloy_rpc_types_eth::TransactionRequest::default()
                    .with_to(to)
                    .with_input(call.abi_encode()),
            )
            .await
            .expect("eth_call");
        C::abi_decode_returns(&out).expect("decode")
    }

    /// Whether `at` holds code (a deployed wallet).
    pub async fn has_code(&self, at: Address) -> bool {
        use alloy_provider::Provider;
        !self
            .provider(0)
            .get_code_at(at)
            .await
            .expect("eth_getCode")
            .is_empty()
    }

    pub async fn balance(&self, who: Address) -> u64 {
        let b =
            paygate_x402::facilitator::embedded::balance_of(&self.rpc, USDC.parse().unwrap(), who)
                .await
                .expect("balanceOf");
        u64::try_from(b).expect("fits")
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The EIP-712 domain of the test chain's USDC (the production `base-sepolia` entry's).
pub fn usdc_domain() -> alloy_sol_types::Eip712Domain {
    let network = Networks::from_config(&builtin_networks())
        .resolve("base-sepolia")
        .expect("built-in network")
        .clone();
    token_domain(&PaymentRequirements {
        network,
        amount: UsdcAmount(0),
        pay_to: Address::ZERO,
        resource: String::new(),
        description: String::new(),
        mime_type: String::new(),
        max_timeout_seconds: 60,
        token: Default::default(),
    })
}

/// What to sign: defaults are a valid payment of `amount` to `pay_to` on Base Sepolia.
#[derive(Clone)]
pub struct PaymentSpec {
    pub payer: usize,
    pub pay_to: Address,
    pub amount: u64,
    pub valid_before: u64,
    pub nonce: B256,
    /// Sign with another key than the payer's (a forged signature).
    pub signer: Option<usize>,
}

impl PaymentSpec {
    pub fn new(payer: usize, pay_to: Address, amount: u64) -> Self {
        Self {
            payer,
            pay_to,
            amount,
            valid_before: now() + 300,
            nonce: B256::from(rand_bytes()),
            signer: None,
        }
    }

    fn signed(&self) -> (SignedAuthorization, String) {
        let mut auth = SignedAuthorization {
            from: address(self.payer),
            to: self.pay_to,
            value: U256::from(self.amount),
            valid_after: U256::ZERO,
            valid_before: U256::from(self.valid_before),
            nonce: self.nonce,
            signature: Default::default(),
        };
        let hash = signing_hash(&auth, &usdc_domain());
        let sig = signer(self.signer.unwrap_or(self.payer))
            .sign_hash_sync(&hash)
            .expect("sign");
        auth.signature = sig.as_bytes().to_vec().into();
        let hex = format!("0x{}", alloy_primitives::hex::encode(&auth.signature));
        (auth, hex)
    }

    fn authorization_json(&self, auth: &SignedAuthorization, sig: &str) -> Value {
        json!({
            "signature": sig,
            "authorization": {
                "from": auth.from.to_checksum(None),
                "to": auth.to.to_checksum(None),
                "value": auth.value.to_string(),
                "validAfter": "0",
                "validBefore": auth.valid_before.to_string(),
                "nonce": format!("{:#x}", auth.nonce),
            }
        })
    }

    /// The v1 payment payload (what `X-PAYMENT` carries, before base64).
    pub fn v1_payload(&self) -> Value {
        let (auth, sig) = self.signed();
        json!({"x402Version": 1, "scheme": "exact", "network": "base-sepolia",
               "payload": self.authorization_json(&auth, &sig)})
    }

    /// The v2 payment payload, echoing `accepted` from a challenge.
    pub fn v2_payload(&self, accepted: &Value) -> Value {
        let (auth, sig) = self.signed();
        json!({"x402Version": 2, "accepted": accepted,
               "payload": self.authorization_json(&auth, &sig)})
    }

    /// The authorization in domain types, signed.
    pub fn authorization(&self) -> SignedAuthorization {
        self.signed().0
    }

    /// The `X-PAYMENT` (v1) header value.
    pub fn v1_header(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.v1_payload().to_string())
    }

    /// The `PAYMENT-SIGNATURE` (v2) header value, echoing `accepted` from a challenge.
    pub fn v2_header(&self, accepted: &Value) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.v2_payload(accepted).to_string())
    }
}

pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn rand_bytes() -> [u8; 32] {
    use std::hash::{BuildHasher, Hasher};
    let mut out = [0u8; 32];
    for chunk in out.chunks_mut(8) {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos(),
        );
        chunk.copy_from_slice(&h.finish().to_le_bytes());
    }
    out
}
