//! One child name under every queue scheme: parse, format and other-recipe detection, lease
//! weight. Checks: `zk_recipes_fuzz::child_name`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| zk_recipes_fuzz::child_name(data));
