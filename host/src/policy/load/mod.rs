//! What a policy file is and what it becomes, before any engine is
//! involved: reading the file (`read`), its settings file (`manifest`), its limits and capabilities
//! (`limits`; `capability`, the table of them; `caps`, what a policy has;
//! and `bounds`: what the default grant allows of each field), the events it declares (`declared`), the cheap checks before
//! compiling (`inspect`),
//! compiling within bounds (`compile`), the compiled forms kept on disk
//! (`cache`), and the errors of these steps (`errors`).
//!
//! This is the bottom of `policy`: it imports nothing from the other groups,
//! so the engine, a call and the chain can all use a spec, a limit or a
//! capability without a circle. The steps that need the engine (linking,
//! `configure`) are `engine/prepare.rs`.

pub(crate) mod bounds;
pub(crate) mod cache;
pub(crate) mod capability;
pub(crate) mod caps;
pub(crate) mod compile;
pub(crate) mod declared;
pub(crate) mod errors;
pub(crate) mod inspect;
pub(crate) mod limits;
pub(crate) mod manifest;
pub(crate) mod read;
