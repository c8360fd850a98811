//! The smart-wallet check's cost at the edge: what the payment service asks of the chain about
//! a payer's signature, counted through the `ChainCalls` seam (a chain whose accounts hold no
//! code), on a real sled store in a temp dir.

use super::super::*;
use alloy_primitives::B256;
use async_trait::async_trait;
use paygate_store::SledStore;
use paygate_x402::network::{builtin_networks, Networks};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A chain whose accounts hold no code, counting what is asked of it.
#[derive(Default)]
struct CodelessChain {
    asked: AtomicUsize,
    /// Every `isValidSignature` is answered with EIP-1271's yes (a wallet its factory would
    /// deploy accepts it).
    accepts: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl paygate_x402::facilitator::ChainCalls for CodelessChain {
    async fn send_call(
        &self,
        _: u64,
        _: Address,
        _: Vec<u8>,
        _: u64,
    ) -> Result<B256, paygate_x402::facilitator::CallError> {
        Err(paygate_x402::facilitator::CallError::Unavailable(
            "sends nothing".into(),
        ))
    }
    async fn view_call(
        &self,
        _: u64,
        _: Address,
        _: Vec<u8>,
    ) -> Result<alloy_primitives::Bytes, paygate_x402::facilitator::CallError> {
        // An account without code answers any call with nothing.
        self.asked.fetch_add(1, Ordering::SeqCst);
        if self.accepts.load(Ordering::SeqCst) {
            let mut yes = vec![0u8; 32];
            yes[..4].copy_from_slice(&paygate_x402::signature::EIP1271_MAGIC);
            return Ok(yes.into());
        }
        Ok(alloy_primitives::Bytes::new())
    }
    fn chain_ids(&self) -> Vec<u64> {
        vec![84532]
    }
    async fn has_code(
        &self,
        _: u64,
        _: Address,
    ) -> Result<bool, paygate_x402::facilitator::CallError> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        Ok(false)
    }
    fn deploys_through(&self, _: u64, _: Address) -> bool {
        false
    }
    async fn block_number(&self, _: u64) -> Result<u64, paygate_x402::facilitator::CallError> {
        Ok(0)
    }
    async fn logs(
        &self,
        _: u64,
        _: Address,
        _: &[B256],
        _: u64,
        _: u64,
    ) -> Result<Vec<alloy_primitives::Log>, paygate_x402::facilitator::CallError> {
        Ok(Vec::new())
    }
    async fn find_event(
        &self,
        _: u64,
        _: Address,
        _: B256,
        _: B256,
        _: B256,
    ) -> Result<Option<B256>, paygate_x402::facilitator::CallError> {
        Ok(None)
    }
}

/// A payment service without a facilitator, asking its wallet questions of a codeless chain.
fn on_codeless_chain() -> (tempfile::TempDir, Arc<CodelessChain>, PaymentService) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
    let usage = Arc::new(PlanUsage::new(store.clone()));
    let chain = Arc::new(CodelessChain::default());
    let networks = Networks::from_config(&builtin_networks());
    let service = PaymentService::new(store, None, usage, networks).with_chain(chain.clone());
    (dir, chain, service)
}

/// A forged EOA-length signature is asked of the chain once per payer: the payer found to hold
/// no code, later forgeries in its name are refused without a call. A smart wallet's (longer)
/// signature is always asked.
#[tokio::test]
async fn a_payer_without_code_is_asked_about_once() {
    let (_dir, chain, service) = on_codeless_chain();
    let (payer, digest) = (Address::repeat_byte(7), B256::repeat_byte(1));
    let forged = alloy_primitives::Bytes::from(vec![1u8; 65]);
    for _ in 0..3 {
        let accepted = service.wallet_signed(84532, payer, digest, &forged).await;
        assert_eq!(accepted, Ok(false));
    }
    // One isValidSignature call and one code check, then nothing.
    assert_eq!(chain.asked.load(Ordering::SeqCst), 2);
    // Another payer is asked; a longer signature is asked every time.
    let other = Address::repeat_byte(8);
    assert_eq!(
        service.wallet_signed(84532, other, digest, &forged).await,
        Ok(false)
    );
    assert_eq!(chain.asked.load(Ordering::SeqCst), 4);
    let long = alloy_primitives::Bytes::from(vec![1u8; 100]);
    for _ in 0..2 {
        assert_eq!(
            service.wallet_signed(84532, payer, digest, &long).await,
            Ok(false)
        );
    }
    assert_eq!(chain.asked.load(Ordering::SeqCst), 6);
}

/// A payer remembered without code whose wallet then accepts a signature (a counterfactual
/// wallet signing through its factory, deployed by its payment) is forgotten: its plain
/// signatures are asked of the chain again.
#[tokio::test]
async fn a_payer_found_to_be_a_wallet_is_asked_again() {
    let (_dir, chain, service) = on_codeless_chain();
    let (payer, digest) = (Address::repeat_byte(7), B256::repeat_byte(1));
    let plain = alloy_primitives::Bytes::from(vec![1u8; 65]);
    let wrapped = alloy_primitives::Bytes::from(vec![1u8; 200]);
    assert_eq!(
        service.wallet_signed(84532, payer, digest, &plain).await,
        Ok(false)
    );
    chain.accepts.store(true, Ordering::SeqCst);
    // Remembered: the plain signature is not asked about.
    assert_eq!(
        service.wallet_signed(84532, payer, digest, &plain).await,
        Ok(false)
    );
    assert_eq!(chain.asked.load(Ordering::SeqCst), 2);
    assert_eq!(
        service.wallet_signed(84532, payer, digest, &wrapped).await,
        Ok(true)
    );
    assert_eq!(
        service.wallet_signed(84532, payer, digest, &plain).await,
        Ok(true)
    );
    assert_eq!(chain.asked.load(Ordering::SeqCst), 4);
}
