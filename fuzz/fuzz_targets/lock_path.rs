//! A lock path, and a node format's name. Checks: `zk_recipes_fuzz::lock_path`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| zk_recipes_fuzz::lock_path(data));
