// Bundles a policy with the SDK into the one ES module the componentizers
// read: `import ... from 'nriwasm'` is the SDK, the world's interfaces
// (`nri-wasm:policy/...`) stay imports, TypeScript is stripped, and the
// engine the bundle is for is written in as __NRI_WASM_ENGINE__.
//
//   node bundle.mjs ENTRY OUT ENGINE
//
// rolldown comes from the tools guest-sdk/install-tools.sh installed
// ($NRI_WASM_GUEST_TOOLS/npm).

import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const [entry, out, engine] = process.argv.slice(2);
if (!entry || !out || !['quickjs', 'spidermonkey'].includes(engine)) {
  process.stderr.write('usage: bundle.mjs ENTRY OUT quickjs|spidermonkey\n');
  process.exit(2);
}
const tools = process.env.NRI_WASM_GUEST_TOOLS;
if (!tools) {
  process.stderr.write('NRI_WASM_GUEST_TOOLS is not set: run through guest-sdk/js/build.sh\n');
  process.exit(2);
}
const require = createRequire(join(tools, 'npm', 'package.json'));
let rolldownPath;
try {
  rolldownPath = require.resolve('rolldown');
} catch {
  process.stderr.write(`rolldown is not installed in ${tools}/npm: run guest-sdk/install-tools.sh\n`);
  process.exit(1);
}
const { rolldown } = await import(pathToFileURL(rolldownPath).href);
const sdk = join(dirname(fileURLToPath(import.meta.url)), '..', 'src', 'nriwasm.js');

const bundle = await rolldown({
  input: entry,
  external: [/^nri-wasm:/, /^wasi:/],
  resolve: { alias: { nriwasm: sdk } },
  transform: { define: { __NRI_WASM_ENGINE__: JSON.stringify(engine) } },
  platform: 'neutral',
  // A policy's tsconfig.json maps 'nriwasm' to the SDK's types for tsc;
  // the bundle takes the SDK's code.
  tsconfig: false,
  logLevel: 'warn',
  onLog(level, log) {
    process.stderr.write(`bundle: ${level}: ${log.message}\n`);
  },
});
await bundle.write({ file: out, format: 'esm', minify: false });
await bundle.close();
