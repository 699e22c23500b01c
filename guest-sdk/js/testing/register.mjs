// Native tests of a JavaScript or TypeScript policy, on Node, without a
// WebAssembly build:
//
//   node --import <guest-sdk/js>/testing/register.mjs --test
//
// (what a project's ./test.sh runs). It installs the module hooks of
// hooks.mjs: `nriwasm` is the SDK's source, `nriwasm/testing` the test host
// (index.mjs), the world's interfaces (`nri-wasm:policy/...`) the test
// host's fakes, and TypeScript is compiled on the fly, so a test imports
// `../policy.js` whether the policy is policy.js or policy.ts.
import { register } from 'node:module';

// The policy's code reads which engine it was bundled for; the tests run it
// as QuickJS, the default engine, sees it: 64-bit integers as numbers.
globalThis.__NRI_WASM_ENGINE__ = 'quickjs';
register('./hooks.mjs', import.meta.url);
