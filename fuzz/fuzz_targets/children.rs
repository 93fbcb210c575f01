//! A listing of children: the queue's order under every scheme, or its refusal after a wrap.
//! Checks: `zk_recipes_fuzz::children`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| zk_recipes_fuzz::children(data));
