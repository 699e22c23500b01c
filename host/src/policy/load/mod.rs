//! Loading, in one place: what a policy file becomes. A directory (and
//! the host configuration's sources) is scanned into specs and loaded
//! (`directory`), each policy by the loader
//! (`loader`: the compiler, the compile cache, the components in use, the
//! registry client) runs the steps (`prepare`, the cheap ones first):
//! reading the file (`read`) or pulling it, the checks before compiling
//! (`inspect`), compiling within bounds (`compile`) or taking the compiled
//! form from disk (`cache`), linking and `configure` on the engine, and,
//! if its settings file asks, a snapshot of the configured instance that
//! its calls start from (`snapshot`, whose steps on bytes are `rewrite`,
//! bounded as a compile is); and it remembers what each policy
//! subscribed to across restarts (`known`). The errors of these steps are
//! `errors` (a refused snapshot is not one: the policy then runs as built).
//!
//! Loading sits above the engine, which only runs calls and knows nothing
//! of it; what a file says (its spec, limits and capabilities) is `spec/`,
//! below both. Reading and inspecting a file need no engine.

pub mod cache;
pub mod compile;
pub mod directory;
pub mod errors;
pub mod inspect;
pub(crate) mod known;
pub mod loader;
pub mod prepare;
pub mod read;
pub mod rewrite;
pub mod snapshot;
