//! Gives freed heap back to the OS after many keep-alive connections were parked: glibc keeps
//! freed buffers in a fragmented heap at its peak size, so without a trim the memory parked
//! connections released would stay resident.

use std::time::Duration;

/// Parks since the last trim that make another trim worth its cost (a heap walk).
const PARKS_PER_TRIM: u64 = 128;

/// Runs forever: every `every`, trims the heap if enough connections were parked meanwhile.
pub async fn trim_after_parks(every: Duration) {
    let mut last = crate::http::server::parks_total();
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let now = crate::http::server::parks_total();
        if now.saturating_sub(last) >= PARKS_PER_TRIM {
            last = now;
            trim();
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn trim() {
    // SAFETY: malloc_trim only releases free pages of glibc's own heap; it takes no pointers
    // and is thread-safe (it locks each arena).
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}
