//! A sequence suffix: parsed exactly when canonical, and written back. Checks: `zk_recipes_fuzz::sequence`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| zk_recipes_fuzz::sequence(data));
