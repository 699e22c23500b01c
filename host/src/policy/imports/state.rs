//! `nri-wasm:policy/state`: the policy's own key-value state, read and
//! written through the call's transaction.

use crate::policy::call::store::CallState;
use crate::wit::state;

impl state::Host for CallState {
    fn get(&mut self, key: String) -> Option<String> {
        self.state.get(&key).map(str::to_string)
    }

    fn set(&mut self, key: String, value: String) -> Result<(), state::StateError> {
        let result = self.state.set(key, value);
        if let Err(e) = &result {
            tracing::debug!(policy = &*self.policy, error = ?e, "state write refused");
        }
        result
    }

    fn remove(&mut self, key: String) {
        self.state.remove(key)
    }

    fn keys(&mut self, prefix: String) -> Vec<String> {
        self.state.keys(&prefix)
    }
}
