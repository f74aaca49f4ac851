//! Fuzzes TaskSpec parsing: every input must keep the properties of
//! `taskspec::robustness::check` (no panic, every error has a message, the depth pre-check
//! agrees with serde_yaml).

#![no_main]

// The host's TaskSpec module, compiled as it is; the target uses only part of it.
#[allow(dead_code, unused_imports)]
#[path = "../../host/src/taskspec/mod.rs"]
mod taskspec;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        taskspec::robustness::check(text);
    }
});
