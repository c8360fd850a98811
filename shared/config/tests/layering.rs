//! The configuration's layers: a file, then the environment over it (figment's `Jail` keeps the
//! environment this test sets to itself).

#[test]
#[allow(clippy::result_large_err)] // figment's Jail API fixes the closure's error type
fn file_then_environment_override() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("c.toml");
    std::fs::write(
        &f,
        "[server]\nlisten = \"127.0.0.1:9000\"\npublic_base_url = \"https://pay.example.com/\"\n\
         [networks.base-sepolia]\nrpc_url = \"http://127.0.0.1:8545\"\n",
    )
    .unwrap();
    figment::Jail::expect_with(|jail| {
        jail.set_env("PAYGATE__STORAGE__PATH", "/tmp/x");
        let c = paygate_config::Config::load(Some(&f)).unwrap();
        assert_eq!(c.server.listen.port(), 9000);
        assert_eq!(c.server.public_base_url(), "https://pay.example.com");
        assert_eq!(c.storage.path, std::path::PathBuf::from("/tmp/x"));
        // Partially overridden networks keep their built-in fields.
        assert_eq!(c.networks["base-sepolia"].chain_id, 84532);
        assert_eq!(c.networks["base-sepolia"].rpc_url, "http://127.0.0.1:8545");
        jail.set_env("PAYGATE__SERVER__LISTEN", "127.0.0.1:9100");
        let c = paygate_config::Config::load(Some(&f)).unwrap();
        assert_eq!(c.server.listen.port(), 9100);
        Ok(())
    });
}

/// What `make run` and a cluster set from the environment: an explorer link turned off (an
/// empty string, quoted) and the deployment-wide operator.
#[test]
#[allow(clippy::result_large_err)] // figment's Jail API fixes the closure's error type
fn an_empty_explorer_and_the_operator_come_from_the_environment() {
    figment::Jail::expect_with(|jail| {
        jail.set_env("PAYGATE__NETWORKS__BASE-SEPOLIA__EXPLORER_TX_URL", "\"\"");
        jail.set_env(
            "PAYGATE__FACILITATOR__OPERATOR",
            "0x5e11e700000000000000000000000000000000e0",
        );
        let c = paygate_config::Config::load(None).unwrap();
        assert_eq!(c.networks["base-sepolia"].explorer_tx_url, "");
        assert_eq!(
            c.facilitator.operator,
            Some(paygate_x402::auth_capture::DEV_OPERATOR_ADDRESS)
        );
        Ok(())
    });
}
