//! What the host knows about the node, for policies.
//!
//! - `topology`: online CPUs, NUMA nodes and memory, read once at start;
//! - `own`: the host's own pod, whose containers no policy may update or
//!   evict;
//! - `view`: every pod and container with its state and effective
//!   resources, built from Synchronize and kept current from every event.

pub mod own;
pub mod topology;
pub mod view;
