//! What every tern process pays before its first byte moves.

/// aws-lc, rustls's crypto provider, can seed its random generator from
/// CPU jitter entropy as well as from the kernel. That collection cost each
/// process about 30 ms of CPU at its first handshake: three quarters of a
/// small copy's CPU, and its latency. The workspace builds aws-lc without
/// it (`.cargo/config.toml`); a build that lost that setting (run from
/// outside the workspace, or a changed variable name) links the collector
/// back in, and its symbols show in the binary.
#[test]
fn the_binary_does_not_collect_cpu_jitter_entropy() {
    let bin = std::fs::read(env!("CARGO_BIN_EXE_tern")).expect("read the tern binary");
    let collector = b"jent_entropy_collector_alloc";
    assert!(
        !bin.windows(collector.len()).any(|w| w == collector),
        "the tern binary links aws-lc's CPU jitter entropy collector: build it from the \
         workspace, whose .cargo/config.toml sets AWS_LC_SYS_NO_JITTER_ENTROPY=1"
    );
}
