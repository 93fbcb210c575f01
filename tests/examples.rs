//! Examples that check their own results, run small.

use std::process::Command;

fn example(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let path = exe.parent().and_then(|d| d.parent()).expect("target dir").join("examples").join(name);
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        assert!(Command::new(cargo).args(["build", "--example", name]).status().expect("cargo").success());
    }
    path
}

#[test]
fn stock_segments_sells_exactly_the_stock_both_ways() {
    let out = Command::new(example("stock_segments"))
        .args(["4", "60", "3"])
        .env_remove("ZK_CONNECT")
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("no oversell, every segment ended at 0"), "{stdout}");
}
