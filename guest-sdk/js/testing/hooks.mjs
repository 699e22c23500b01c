// Module hooks for native tests (registered by register.mjs): they map the
// names a policy imports to what runs on Node, and compile TypeScript with
// the compiler guest-sdk/install-tools.sh installed.
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = new URL('./', import.meta.url);
const sdk = new URL('../src/', import.meta.url);
const FAKES = { event: 'event.mjs', host: 'host.mjs', node: 'node.mjs', state: 'state.mjs' };

export async function resolve(specifier, context, next) {
  if (specifier === 'nriwasm') return { url: new URL('nriwasm.js', sdk).href, shortCircuit: true };
  if (specifier === 'nriwasm/testing') return { url: new URL('index.mjs', here).href, shortCircuit: true };
  const world = /^nri-wasm:policy\/([a-z]+)@/.exec(specifier);
  if (world) {
    const fake = FAKES[world[1]];
    if (!fake) throw new Error(`the test host has no interface ${specifier}`);
    return { url: new URL(`imports/${fake}`, here).href, shortCircuit: true };
  }
  // TypeScript's convention: `./policy.js` names policy.ts when only that exists.
  if (context.parentURL && /^\.\.?\//.test(specifier) && specifier.endsWith('.js')) {
    const js = new URL(specifier, context.parentURL);
    if (js.protocol === 'file:' && !existsSync(fileURLToPath(js))) {
      const ts = new URL(specifier.replace(/\.js$/, '.ts'), context.parentURL);
      if (existsSync(fileURLToPath(ts))) return { url: ts.href, shortCircuit: true };
    }
  }
  return next(specifier, context);
}

let ts;
function typescript() {
  if (ts) return ts;
  const tools = process.env.NRI_WASM_GUEST_TOOLS;
  if (!tools) throw new Error('a TypeScript policy needs NRI_WASM_GUEST_TOOLS (run the tests with ./test.sh)');
  const require = createRequire(join(tools, 'npm', 'package.json'));
  try {
    ts = require('typescript');
  } catch {
    throw new Error(`typescript is not installed in ${tools}/npm: run guest-sdk/install-tools.sh --lang js`);
  }
  return ts;
}

export async function load(url, context, next) {
  if (url.startsWith('file:') && url.endsWith('.ts')) {
    const path = fileURLToPath(url);
    const compiled = typescript().transpileModule(readFileSync(path, 'utf8'), {
      fileName: path,
      compilerOptions: { module: 99 /* ESNext */, target: 9 /* ES2022 */, sourceMap: false, inlineSourceMap: true },
    });
    return { format: 'module', source: compiled.outputText, shortCircuit: true };
  }
  return next(url, context);
}
