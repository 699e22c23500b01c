//! Seams for tests, benchmarks and fuzz targets: not part of the stable
//! surface, and compiled only with the `testing` feature (which every test
//! crate of the workspace enables) or in the host's own unit tests.
//!
//! What the binary never needs lives here or behind the same feature, so
//! that the crate's public surface is what the binary and an embedder use:
//! - [`StateWriter`], with `policy::call::state::StateStore::in_dir_with`: the
//!   state store writing through something other than the file system
//!   (a full volume, a failing disk);
//! - `policy::spec::manifest::PolicySpec::granting_all`: a spec with every
//!   capability granted, dangerous ones included, which no policy loaded
//!   from a directory gets;
//! - `nri::frame::FrameDecoder::extend`: bytes appended without a socket;
//! - [`NullDispatcher`]: a dispatcher that changes nothing, the baseline of
//!   the transport tests;
//! - `policy::load::directory::load_dir`: a directory loaded once, without the
//!   reloader the host loads through;
//! - `policy::reload::Reloader::check_tags`: the registry tag check on
//!   demand, which the host runs from `watch` on a timer or SIGHUP;
//! - `policy::call::compiled::CompiledPolicy::shares_code_with`: whether two
//!   loaded policies run one copy of the same compiled code;
//! - `policy::chain::ManualClock` and `Chain::with_clock`: a chain whose
//!   breakers read a clock the test moves, for back-off without sleeping.

pub use crate::nri::dispatch::NullDispatcher;
pub use crate::policy::call::state::StateWriter;
