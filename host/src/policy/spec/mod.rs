//! What a policy file says, before anything is done with it: its settings
//! file (`manifest`), its limits (`limits`), the capabilities it may have
//! (`capability`, the table; `caps`, what a policy has; `bounds`, what the
//! default grant allows of each field), the events its component
//! declares (`declared`) and what the component says of itself
//! (`inspection`).
//!
//! The bottom of `policy`: it imports nothing from the other groups, so
//! that loading, a call and the chain can all name a spec, a limit or a
//! capability without a circle.

pub(crate) mod bounds;
pub mod capability;
pub mod caps;
pub mod declared;
pub mod inspection;
pub mod limits;
pub mod manifest;
