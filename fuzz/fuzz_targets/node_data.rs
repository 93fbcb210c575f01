//! Node data: participant id and proclaimed value, revocation. Checks: `zk_recipes_fuzz::node_data`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| zk_recipes_fuzz::node_data(data));
