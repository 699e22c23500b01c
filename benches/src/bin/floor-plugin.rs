//! The floor of the real-path benchmark (`benches/real_path.rs`): a plugin
//! on the project's own transport that does what one small native NRI
//! plugin does, and nothing else. It subscribes to CreateContainer only and
//! sets one environment variable, as the NRI stub plugin of the issue's
//! measurements on containerd did.
//!
//! Usage: `floor-plugin SOCKET`; the answer of every request is traced
//! (target `nri_wasm::answer`, JSON lines on stderr) as the host's is.
//!
//! `floor-plugin --echo SOCKET` is the floor below that: no transport at
//! all, blocking reads and writes of plain bytes. It connects, then for
//! every message `[u32 request length][u32 answer length][u32 hold µs]
//! [request]` it computes (spins) for the hold time, as a chain would, and
//! answers with that many bytes: the kernel's round trip between two
//! processes for an answer that takes that long, what any plugin pays
//! besides its own code.

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

/// The echo of `--echo`: answers each message until the socket closes.
fn echo(socket: &str) -> anyhow::Result<()> {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(socket)?;
    let mut buf = Vec::new();
    loop {
        let mut head = [0u8; 12];
        if s.read_exact(&mut head).is_err() {
            return Ok(());
        }
        let field = |i: usize| u32::from_be_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
        let (request, answer) = (field(0) as usize, field(4) as usize);
        let hold = std::time::Duration::from_micros(u64::from(field(8)));
        buf.resize(request.max(answer), 0);
        s.read_exact(&mut buf[..request])?;
        let start = std::time::Instant::now();
        while start.elapsed() < hold {
            std::hint::spin_loop();
        }
        s.write_all(&buf[..answer])?;
    }
}

fn main() -> anyhow::Result<()> {
    let usage = || anyhow::anyhow!("usage: floor-plugin [--echo] SOCKET");
    let socket = std::env::args().nth(1).ok_or_else(usage)?;
    if socket == "--echo" {
        return echo(&std::env::args().nth(2).ok_or_else(usage)?);
    }
    nri_wasm::cli::init_logging("warn,nri_wasm::answer=trace", nri_wasm::config::LogFormat::Json)?;
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
