// The test host's `state` interface: the call's copy of the policy's state,
// committed by the test host when the event succeeds.
import { current } from '../call.mjs';

// The host's longest key.
const MAX_KEY_BYTES = 256;
// What each key counts toward the state's limit beside its key and value,
// as the host counts it.
const ENTRY_BYTES = 64;
const size = (m) => [...m].reduce((n, [k, v]) => n + Buffer.byteLength(k) + Buffer.byteLength(v) + ENTRY_BYTES, 0);

export function get(key) { return current('state.get').state.get(key); }
export function set(key, value) {
  const call = current('state.set');
  const bytes = Buffer.byteLength(key);
  if (bytes === 0 || bytes > MAX_KEY_BYTES) {
    throw { tag: 'invalid-key', val: `key of ${bytes} bytes; keys are 1 to ${MAX_KEY_BYTES} bytes` };
  }
  const next = new Map(call.state);
  next.set(key, value);
  if (size(next) > call.stateLimit) throw { tag: 'limit-exceeded', val: call.stateLimit };
  call.state = next;
}
export function remove(key) { current('state.remove').state.delete(key); }
export function keys(prefix) { return [...current('state.keys').state.keys()].filter((k) => k.startsWith(prefix)).sort(); }
