//! An upstream response head: the first byte picks the read boundaries, the rest is the input
//! (`weir_proxy::http::props::response_head`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some((&seed, input)) = data.split_first() {
        weir_proxy::http::props::response_head(seed, input);
    }
});
