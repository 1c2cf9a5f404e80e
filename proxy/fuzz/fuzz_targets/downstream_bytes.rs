//! Any bytes a client sends the downstream HTTP/1 server (fast path, guard, hyper) before it
//! half-closes: well-formed responses, then a close (`weir_proxy::http::props::downstream_bytes`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| weir_proxy::http::props::downstream_bytes(data));
