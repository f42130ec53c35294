/// Send diagnostics (not the access log) to stderr at `level` ("info", "debug", ...);
/// `RUST_LOG` overrides. Safe to call once per process. The h2 crate's own messages are
/// what clients did wrong (a PING ack never asked for, resets): debug, not warnings; the
/// server logs what it does about them (a flood's GOAWAY) itself.
pub fn init_diagnostics(level: &str) {
    let given = std::env::var("RUST_LOG").ok();
    let base = given.clone().unwrap_or_else(|| level.to_string());
    let quiet = if base.contains("h2") || base.contains("debug") || base.contains("trace") {
        String::new()
    } else {
        ",h2=error".to_string()
    };
    let filter = tracing_subscriber::EnvFilter::try_new(format!("{base}{quiet}"))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}
