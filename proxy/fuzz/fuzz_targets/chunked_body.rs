//! A chunked body, through the upstream decoder and the guard's tracker: the first byte picks the read boundaries, the rest is the input
//! (`weir_proxy::http::props::chunked_body`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some((&seed, input)) = data.split_first() {
        weir_proxy::http::props::chunked_body(seed, input);
    }
});
