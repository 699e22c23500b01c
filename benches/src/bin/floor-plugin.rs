//! The floor of the real-path benchmark (`benches/real_path.rs`): a plugin
//! on the project's own transport that does what one small native NRI
//! plugin does, and nothing else. It subscribes to CreateContainer only and
//! sets one environment variable, as the NRI stub plugin of the issue's
//! measurements on containerd did.
//!
//! Usage: `floor-plugin SOCKET`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use nri_wasm::api::api as pb;
use nri_wasm::nri::{
    ConnectOptions, DispatchError, Dispatcher, Endpoint, EventKind, EventMask, PluginIdentity, Supervisor,
};
use tokio_util::sync::CancellationToken;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Floor;

#[async_trait]
impl Dispatcher for Floor {
    fn events(&self) -> EventMask {
        EventMask::EMPTY.with(EventKind::CreateContainer)
    }

    async fn create_container(
        &self,
        _req: pb::CreateContainerRequest,
    ) -> Result<pb::CreateContainerResponse, DispatchError> {
        let mut adjust = pb::ContainerAdjustment::default();
        adjust.env.push(pb::KeyValue { key: "FLOOR".into(), value: "1".into(), ..Default::default() });
        Ok(pb::CreateContainerResponse { adjust: Some(adjust).into(), ..Default::default() })
    }
}

fn main() -> anyhow::Result<()> {
    let socket = std::env::args().nth(1).ok_or_else(|| anyhow::anyhow!("usage: floor-plugin SOCKET"))?;
    // The transport as the host binary runs it.
    let runtime = nri_wasm::cli::transport_runtime()?;
    runtime.block_on(async move {
        let stop = CancellationToken::new();
        nri_wasm::cli::stop_on_signals(stop.clone())?;
        let options = ConnectOptions {
            identity: PluginIdentity::new("floor", "10")?,
            endpoint: Endpoint::Socket(socket.into()),
            register_timeout: Duration::from_secs(5),
            backoff_initial: Duration::from_millis(50),
            backoff_max: Duration::from_millis(500),
        };
        Supervisor::new(options, Arc::new(Floor), stop).run().await?;
        Ok(())
    })
}
