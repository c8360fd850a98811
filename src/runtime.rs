//! The CLI commands' runtime.

/// Runs a command's future to completion on a runtime of its own (the CLI commands).
pub(crate) fn block_on<F: std::future::Future>(f: F) -> anyhow::Result<F::Output> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(f))
}
