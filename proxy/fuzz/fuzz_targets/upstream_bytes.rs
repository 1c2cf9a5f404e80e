//! Any bytes an upstream answers a GET with before it closes: the client's response, body and
//! trailers are what the decoders read from them whole, and the connection is pooled only after
//! a complete keep-alive response (`weir_proxy::http::props::upstream_bytes`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| weir_proxy::http::props::upstream_bytes(data));
