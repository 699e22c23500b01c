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
import { appendFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
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
const { output } = await bundle.write({ file: out, format: 'esm', minify: false, sourcemap: 'hidden' });
await bundle.close();

// The bundle's line table: for each line of bundle.js with code from a
// file of the policy (not the SDK, not node_modules), its segments as
// [column, file, line] (the column in bundle.js from 0; the file relative
// to the policy's directory; the line in that file from 1). Appended as
// globalThis.__nriwasmSources, where the SDK finds the author's line of an
// exception's stack (both engines name bundle.js:LINE in their frames).
// Appending keeps every line number. It is one JSON string, not an object
// literal: a string costs the engine nothing to evaluate, and the SDK
// parses it only when it reports a failure.
const chunk = output.find((o) => o.type === 'chunk' && o.map);
if (chunk) {
  const policyDir = dirname(resolve(entry));
  const sdkDir = dirname(sdk);
  const files = [];
  const fileIndex = new Map();
  const sourceFile = (i) => {
    const source = chunk.map.sources[i];
    if (typeof source !== 'string' || source.startsWith('\0') || source.includes(':')) return null;
    const path = resolve(dirname(out), source);
    // The SDK's frames are named `nriwasm`; a dependency's are no line
    // the author wrote, and would only grow the table.
    if (path.startsWith(sdkDir + sep) || path.split(sep).includes('node_modules')) return null;
    if (!fileIndex.has(path)) {
      fileIndex.set(path, files.length);
      files.push(relative(policyDir, path));
    }
    return fileIndex.get(path);
  };
  const lines = {};
  let source = 0;
  let origLine = 0;
  chunk.map.mappings.split(';').forEach((segments, generated) => {
    let column = 0;
    const here = [];
    for (const segment of segments.split(',')) {
      if (segment === '') continue;
      const fields = vlq(segment);
      column += fields[0];
      if (fields.length < 4) continue;
      source += fields[1];
      origLine += fields[2];
      const file = sourceFile(source);
      if (file !== null) here.push([column, file, origLine + 1]);
    }
    if (here.length > 0) lines[generated + 1] = here;
  });
  const table = JSON.stringify(JSON.stringify({ files, lines }));
  appendFileSync(out, `\nglobalThis.__nriwasmSources = ${table};\n`);
}

/** The numbers of one source-map segment (base64 VLQ, relative values). */
function vlq(segment) {
  const digits = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
  const values = [];
  let value = 0;
  let shift = 0;
  for (const c of segment) {
    const digit = digits.indexOf(c);
    value += (digit & 31) << shift;
    if (digit & 32) {
      shift += 5;
    } else {
      values.push(value & 1 ? -(value >>> 1) : value >>> 1);
      value = 0;
      shift = 0;
    }
  }
  return values;
}
