//! A registry file: the loader refuses it with a line and column inside the text, or accepts it
//! and its index routes requests (`weir_proxy::discovery::props::registry_text`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| weir_proxy::discovery::props::registry_text(data));
