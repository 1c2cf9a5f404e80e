//! One target's watch stream: open it, apply every update, and after an error reconnect with
//! backoff, the last known answer serving meanwhile. Runs until the target is evicted.

use std::sync::Arc;

use weir_proto::discovery::{self as pb, discovery_client::DiscoveryClient};

use super::{backoff::Backoff, target::Entry, Control};

pub(super) async fn run(control: Arc<Control>, entry: Arc<Entry>) {
    let mut backoff = Backoff::new(control.config.reconnect);
    let request = pb::WatchRequest {
        target: Some(entry.key.to_proto()),
        proxy: Some(control.proxy.clone()),
    };
    loop {
        let mut client = DiscoveryClient::new(control.channel.clone());
        match client.watch(request.clone()).await {
            Ok(response) => {
                control.stream_up();
                let mut updates = response.into_inner();
                loop {
                    match updates.message().await {
                        Ok(Some(update)) => {
                            backoff.reset();
                            control.stream_up();
                            control.apply(&entry, update);
                        }
                        Ok(None) => {
                            tracing::info!(key = %entry.key, "control plane ended the watch");
                            break;
                        }
                        Err(status) => {
                            tracing::info!(key = %entry.key, %status, "watch stream failed");
                            break;
                        }
                    }
                }
            }
            Err(status) => {
                tracing::debug!(key = %entry.key, %status, "watch could not be opened");
            }
        }
        control.stream_down();
        tokio::time::sleep(backoff.next_delay()).await;
    }
}
