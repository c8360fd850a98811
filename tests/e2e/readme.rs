//! README's commands as written (issue 52), so the newcomer's page cannot go stale: `make
//! run`'s own script (`scripts/dev_env.py`: anvil with the dev contracts, the payout provider
//! simulator, the echo upstream, the dev org and corridor) serving this build of the binary,
//! then every shell block README marks `<!-- runs -->` (the whole loop), and the block of
//! `docs/ways-of-paying.md` marked to run after it (the escrow example), in one shell, in order,
//! exactly as a reader pastes them (`paygate` on the `PATH`; `.run/dev.json` in the working
//! directory). A command that fails fails the test (`set -euo pipefail`).
//!
//! It takes `make run`'s fixed ports (8402, 8403, 8404, 8545): it fails while a `make run` is up.
//! First, one of them held by another process, the script refuses to start, saying which.

use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The shell blocks of `markdown` that follow a line starting with `marker`.
fn marked_blocks(markdown: &str, marker: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut lines = markdown.lines();
    while let Some(line) = lines.next() {
        if !line.starts_with(marker) {
            continue;
        }
        assert_eq!(lines.next(), Some("```sh"), "a shell block after {line:?}");
        let block: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        blocks.push(block.join("\n"));
    }
    blocks
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn test_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} (run via `make test`)"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_commands_run_as_written_against_make_runs_environment() {
    let root = env!("CARGO_MANIFEST_DIR");
    let binary = env!("CARGO_BIN_EXE_paygate");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let escrow = std::fs::read_to_string(format!("{root}/docs/ways-of-paying.md")).unwrap();
    let mut blocks = marked_blocks(&readme, "<!-- runs -->");
    assert_eq!(blocks.len(), 3, "the loop's three steps");
    blocks.extend(marked_blocks(&escrow, "<!-- runs after README's loop -->"));
    assert_eq!(blocks.len(), 4, "and the escrow example");

    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join(".run");
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(binary, bin.join("paygate")).unwrap();
    let dev_env = || {
        let mut c = tokio::process::Command::new("python3");
        c.arg(format!("{root}/scripts/dev_env.py"))
            .args(["--binary", binary])
            .args(["--anvil", &test_env("PAYGATE_TEST_ANVIL")])
            .args(["--artifacts", &test_env("PAYGATE_TEST_USDC_ARTIFACTS")])
            .args(["--contracts", &test_env("PAYGATE_TEST_CONTRACTS")])
            .env("PAYGATE_DEV_RUN", &run);
        c
    };
    // Another process on one of its fixed ports (another `make run` still stopping, another
    // checkout): make run says which and starts nothing (no chain on 8545).
    {
        let held = std::net::TcpListener::bind("127.0.0.1:8403").expect("port 8403 free");
        let refused = tokio::time::timeout(Duration::from_secs(30), dev_env().output())
            .await
            .expect("make run's script refuses at once")
            .unwrap();
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{said}");
        assert!(
            said.contains("make run needs 127.0.0.1:8403, which another process listens on"),
            "{said}"
        );
        assert!(
            std::net::TcpListener::bind("127.0.0.1:8545").is_ok(),
            "a chain was started"
        );
        drop(held);
    }
    let mut make_run = dev_env()
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("make run's script");
    let mut out = BufReader::new(make_run.stdout.take().unwrap()).lines();
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut said = String::new();
    loop {
        let line = tokio::time::timeout_at(deadline.into(), out.next_line()).await;
        match line {
            Ok(Ok(Some(l))) if l.starts_with("paygate is running") => break,
            Ok(Ok(Some(l))) => said += &(l + "\n"),
            other => panic!("make run's script never got ready ({other:?}):\n{said}"),
        }
    }
    // What make run prints after the ready line is read on, so the script never blocks.
    tokio::spawn(async move { while let Ok(Some(_)) = out.next_line().await {} });

    let script = format!("set -euo pipefail\n{}\n", blocks.join("\n"));
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let ran = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(dir.path())
        .env("PATH", path)
        .env_remove("PAYGATE_API_KEY")
        .env_remove("PAYGATE_PAYER_KEY")
        .env_remove("PAYGATE_URL")
        .output();
    let ran = tokio::time::timeout(Duration::from_secs(300), ran)
        .await
        .expect("README's commands finish")
        .unwrap();
    // Ctrl-C's equivalent: make run stops everything it started.
    let pid = make_run.id().expect("make run's pid");
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let stopped = tokio::time::timeout(Duration::from_secs(60), make_run.wait()).await;
    let stdout = String::from_utf8_lossy(&ran.stdout);
    let stderr = String::from_utf8_lossy(&ran.stderr);
    let log = std::fs::read_to_string(run.join("paygate.log")).unwrap_or_default();
    assert!(
        ran.status.success(),
        "README's commands failed:\n{script}\nstdout:\n{stdout}\nstderr:\n{stderr}\nlog:\n{}",
        tail(&log, 60)
    );
    assert!(stopped.is_ok(), "make run did not stop");
    // What the reader is told to expect.
    assert!(stdout.contains("402 Payment Required"), "{stdout}");
    assert!(
        stderr.contains("paid"),
        "paygate pay says what it paid: {stderr}"
    );
    assert!(
        stdout.contains("\"refundedUSDC\": \"0.004000\""),
        "{stdout}"
    );
}
