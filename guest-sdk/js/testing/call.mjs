// The call in progress, shared by the test host (index.mjs) and its fake
// interfaces (imports/): the host of a native test runs one call at a time.
const KEY = Symbol.for('nri-wasm.test-call');

/** The call in progress; `what` names the function asked, for the error outside a call. */
export function current(what) {
  const call = globalThis[KEY];
  if (!call) throw new Error(`${what} was called outside a call of the test host (run the policy with TestHost.run)`);
  return call;
}

export function enter(call) {
  globalThis[KEY] = call;
}

export function leave() {
  globalThis[KEY] = undefined;
}
