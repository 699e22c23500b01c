// Generates the JavaScript SDK's view of the nri-wasm:policy world from the
// resolved WIT (the JSON of `wasm-tools component wit <dir> --json`, read
// from stdin):
//
//   --js   src/world.js: the world's imported interfaces, wrapped so that a
//          policy sees the same values on both engines (QuickJS and
//          SpiderMonkey): 64-bit integers as numbers, absent options as
//          `undefined`; and the shapes that turn a reply into what the
//          engine in use lowers;
//   --dts  types/world.d.ts: TypeScript definitions of every type of the
//          world and of the wrapped interfaces;
//   --schema src/schema.js: every named type as data (its fields, cases,
//          element types), which the native test support (src/testing.mjs)
//          walks to read NRI's JSON into the world's records.
//
//   node tools/witgen.mjs --js|--dts|--schema --world policy < wit.json
//
// guest-sdk/js/gen.sh runs it and keeps the checked-in files current.

import { readFileSync } from 'node:fs';

const args = process.argv.slice(2);
const mode = args.includes('--dts') ? 'dts' : args.includes('--js') ? 'js' : args.includes('--schema') ? 'schema' : null;
const worldName = args[args.indexOf('--world') + 1];
if (!mode || !worldName || args.indexOf('--world') < 0) {
  process.stderr.write('usage: witgen.mjs --js|--dts|--schema --world NAME < wit.json\n');
  process.exit(2);
}
const wit = JSON.parse(readFileSync(0, 'utf8'));
const world = wit.worlds.find((w) => w.name === worldName);
if (!world) throw new Error(`no world ${worldName}`);

// ---- names -----------------------------------------------------------------

const words = (name) => name.split('-');
const camel = (name) => words(name).map((w, i) => (i === 0 ? w : w[0].toUpperCase() + w.slice(1))).join('');
const pascal = (name) => words(name).map((w) => w[0].toUpperCase() + w.slice(1)).join('');

function packageOf(iface) {
  return wit.packages[iface.package].name; // e.g. nri-wasm:policy@0.3.0
}

function importPath(iface) {
  const pkg = packageOf(iface);
  const at = pkg.indexOf('@');
  return at < 0 ? `${pkg}/${iface.name}` : `${pkg.slice(0, at)}/${iface.name}${pkg.slice(at)}`;
}

// ---- types -----------------------------------------------------------------

/** The type a `type` alias (a `use`) stands for, followed to its end. */
function resolve(ref) {
  while (typeof ref === 'number') {
    const t = wit.types[ref];
    if (t.kind && typeof t.kind === 'object' && 'type' in t.kind) {
      ref = t.kind.type;
      continue;
    }
    return ref;
  }
  return ref;
}

const PRIMITIVE_TS = {
  bool: 'boolean', u8: 'number', u16: 'number', u32: 'number', u64: 'number',
  s8: 'number', s16: 'number', s32: 'number', s64: 'number',
  f32: 'number', f64: 'number', char: 'string', string: 'string',
};

// Every named type, once (aliases resolve to the type they name).
const named = new Map(); // id -> TS name
for (const [id, t] of wit.types.entries()) {
  if (!t.name || resolve(id) !== id) continue;
  const name = pascal(t.name);
  for (const [other, n] of named) {
    if (n === name) throw new Error(`two types are named ${name} (${other} and ${id})`);
  }
  named.set(id, name);
}

function tsType(ref) {
  ref = resolve(ref);
  if (typeof ref === 'string') {
    if (!(ref in PRIMITIVE_TS)) throw new Error(`unsupported primitive ${ref}`);
    return PRIMITIVE_TS[ref];
  }
  if (named.has(ref)) return named.get(ref);
  return tsAnonymous(ref);
}

function tsAnonymous(ref) {
  const k = wit.types[ref].kind;
  if ('option' in k) {
    const inner = resolve(k.option);
    if (typeof inner === 'number' && 'option' in wit.types[inner].kind) throw new Error('option<option<T>> is not supported');
    return `${tsType(k.option)} | undefined`;
  }
  if ('list' in k) {
    const inner = tsType(k.list);
    return inner.includes('|') ? `Array<${inner}>` : `${inner}[]`;
  }
  if ('tuple' in k) return `[${k.tuple.types.map(tsType).join(', ')}]`;
  if ('result' in k) throw new Error('result is supported only as a function result');
  throw new Error(`unsupported type ${JSON.stringify(k)}`);
}

/** Whether values of the type differ between the engines (64-bit or option inside). */
const differs = new Map();
function needsWork(ref) {
  ref = resolve(ref);
  if (typeof ref === 'string') return ref === 'u64' || ref === 's64';
  if (differs.has(ref)) return differs.get(ref);
  differs.set(ref, false); // no recursive types in WIT, but be safe
  const k = wit.types[ref].kind;
  let v = false;
  if ('option' in k) v = true;
  else if ('list' in k) v = needsWork(k.list);
  else if ('tuple' in k) v = k.tuple.types.some(needsWork);
  else if ('record' in k) v = k.record.fields.some((f) => needsWork(f.type));
  else if ('variant' in k) v = k.variant.cases.some((c) => c.type != null && needsWork(c.type));
  else if ('result' in k) v = [k.result.ok, k.result.err].some((t) => t != null && needsWork(t));
  differs.set(ref, v);
  return v;
}

// Shapes: how to walk a value. `0` means nothing to do; 'i' a 64-bit
// integer; ['o', s] an option; ['l', s] a list; ['r', {field: s}] a record;
// ['v', {case: s}] a variant; ['t', [s...]] a tuple. Named types are
// referred to by name (`S.Name`), so each is written once.
function shape(ref) {
  ref = resolve(ref);
  if (!needsWork(ref)) return '0';
  if (typeof ref === 'string') return "'i'";
  if (named.has(ref)) return `S.${named.get(ref)}`;
  return shapeOf(ref);
}

function shapeOf(ref) {
  const k = wit.types[ref].kind;
  if ('option' in k) return `['o', ${shape(k.option)}]`;
  if ('list' in k) return `['l', ${shape(k.list)}]`;
  if ('tuple' in k) return `['t', [${k.tuple.types.map(shape).join(', ')}]]`;
  if ('record' in k) {
    const fields = k.record.fields.filter((f) => needsWork(f.type)).map((f) => `${camel(f.name)}: ${shape(f.type)}`);
    return `['r', { ${fields.join(', ')} }]`;
  }
  if ('variant' in k) {
    const cases = k.variant.cases.filter((c) => c.type != null && needsWork(c.type)).map((c) => `'${c.name}': ${shape(c.type)}`);
    return `['v', { ${cases.join(', ')} }]`;
  }
  throw new Error(`no shape for ${JSON.stringify(k)}`);
}

// ---- docs ------------------------------------------------------------------

function doc(docs, indent) {
  const text = docs?.contents;
  if (!text) return '';
  const lines = text.split('\n');
  return `${indent}/**\n${lines.map((l) => `${indent} *${l ? ` ${l.replace(/\*\//g, '*\\/')}` : ''}`).join('\n')}\n${indent} */\n`;
}

// ---- the world's imported interfaces ----------------------------------------

const imported = Object.values(world.imports)
  .filter((item) => item.interface)
  .map((item) => wit.interfaces[item.interface.id])
  // An interface of types only has nothing to import (and QuickJS refuses
  // to resolve an import of it).
  .filter((iface) => Object.keys(iface.functions).length > 0)
  .sort((a, b) => (a.name < b.name ? -1 : 1));

function fnResult(f) {
  if (f.result == null) return { kind: 'none' };
  const r = resolve(f.result);
  if (typeof r === 'number' && 'result' in wit.types[r].kind) {
    const { ok, err } = wit.types[r].kind.result;
    return { kind: 'result', ok, err };
  }
  return { kind: 'value', type: f.result };
}

// ---- output: TypeScript ------------------------------------------------------

function emitDts() {
  const out = [];
  out.push('// Code generated by guest-sdk/js/tools/witgen.mjs from the WIT package');
  out.push(`// ${wit.packages[0].name}, world ${worldName}. DO NOT EDIT.`);
  out.push('//');
  out.push('// The values a policy sees through the SDK, on either engine: 64-bit');
  out.push('// integers are numbers (exact up to 2^53), an absent option is `undefined`');
  out.push('// (an optional property), a record has camelCase fields, an enum is the');
  out.push('// name of its case, a variant is `{ tag, val }`.');
  out.push('');
  for (const [id, name] of [...named].sort((a, b) => (a[1] < b[1] ? -1 : 1))) {
    const t = wit.types[id];
    const k = t.kind;
    out.push(doc(t.docs, '').trimEnd());
    if ('record' in k) {
      out.push(`export interface ${name} {`);
      for (const f of k.record.fields) {
        const r = resolve(f.type);
        const isOption = typeof r === 'number' && 'option' in wit.types[r].kind;
        const d = doc(f.docs, '  ');
        if (d) out.push(d.trimEnd());
        if (isOption) out.push(`  ${camel(f.name)}?: ${tsType(wit.types[r].kind.option)};`);
        else out.push(`  ${camel(f.name)}: ${tsType(f.type)};`);
      }
      out.push('}');
    } else if ('enum' in k) {
      out.push(`export type ${name} =`);
      k.enum.cases.forEach((c, i) => out.push(`  | '${c.name}'${i === k.enum.cases.length - 1 ? ';' : ''}`));
    } else if ('variant' in k) {
      out.push(`export type ${name} =`);
      k.variant.cases.forEach((c, i) => {
        const end = i === k.variant.cases.length - 1 ? ';' : '';
        out.push(c.type == null ? `  | { tag: '${c.name}' }${end}` : `  | { tag: '${c.name}'; val: ${tsType(c.type)} }${end}`);
      });
    } else if ('option' in k || 'list' in k || 'tuple' in k) {
      out.push(`export type ${name} = ${tsAnonymous(id)};`);
    } else {
      throw new Error(`unsupported named type ${name}: ${JSON.stringify(k)}`);
    }
    out.push('');
  }
  for (const iface of imported) {
    const fns = Object.values(iface.functions);
    out.push(doc(iface.docs, '').trimEnd());
    out.push(`export interface ${pascal(iface.name)}Interface {`);
    for (const f of fns) {
      const params = f.params.map((p) => `${camel(p.name)}: ${tsType(p.type)}`).join(', ');
      const r = fnResult(f);
      let ret = 'void';
      if (r.kind === 'value') ret = tsType(r.type);
      if (r.kind === 'result') ret = r.ok == null ? 'void' : tsType(r.ok);
      const d = doc(f.docs, '  ');
      if (d) out.push(d.trimEnd());
      if (r.kind === 'result') {
        out.push(`  /** Throws a WitError whose \`payload\` is a ${r.err == null ? 'nothing' : tsType(r.err)} when the host answers with an error. */`);
      }
      out.push(`  ${camel(f.name)}(${params}): ${ret};`);
    }
    out.push('}');
    out.push('');
  }
  const exports = Object.entries(world.exports).filter(([, e]) => e.function);
  out.push('/** What the component exports (the SDK\'s `policy()` makes it). */');
  out.push('export interface WorldExports {');
  for (const [, e] of exports) {
    const f = e.function;
    const params = f.params.map((p) => `${camel(p.name)}: ${tsType(p.type)}`).join(', ');
    const r = fnResult(f);
    const ret = r.kind === 'result' ? (r.ok == null ? 'void' : tsType(r.ok)) : r.kind === 'value' ? tsType(r.type) : 'void';
    const d = doc(f.docs, '  ');
    if (d) out.push(d.trimEnd());
    out.push(`  ${camel(f.name)}(${params}): ${ret};`);
  }
  out.push('}');
  return `${out.filter((l, i, all) => !(l === '' && all[i - 1] === '')).join('\n')}\n`;
}

// ---- output: JavaScript --------------------------------------------------------

function emitJs() {
  const out = [];
  out.push('// Code generated by guest-sdk/js/tools/witgen.mjs from the WIT package');
  out.push(`// ${wit.packages[0].name}, world ${worldName}. DO NOT EDIT.`);
  out.push('//');
  out.push('// The world\'s imported interfaces as a policy sees them through the SDK,');
  out.push('// the same on QuickJS (which gives 64-bit integers as numbers and absent');
  out.push('// options as null) and SpiderMonkey (bigints and undefined): numbers and');
  out.push('// undefined. `lower` turns a value back into what the engine in use takes.');
  out.push('');
  for (const iface of imported) out.push(`import * as ${camel(iface.name)}$ from '${importPath(iface)}';`);
  out.push('');
  out.push('/** An error result of the host, thrown by the wrapped functions. */');
  out.push('export class WitError extends Error {');
  out.push('  constructor(fn, payload) {');
  out.push('    super(`${fn}: ${typeof payload === \'object\' && payload !== null ? JSON.stringify(payload) : String(payload)}`);');
  out.push("    this.name = 'WitError';");
  out.push('    this.payload = payload;');
  out.push('  }');
  out.push('}');
  out.push('');
  out.push('/** The shapes of the named types that differ between engines. */');
  out.push('export const S = {};');
  // Named shapes in dependency order: a shape refers only to shapes written before it.
  const done = new Set();
  const order = [];
  const visit = (ref) => {
    ref = resolve(ref);
    if (typeof ref !== 'number' || !needsWork(ref)) return;
    const k = wit.types[ref].kind;
    const children = [];
    if ('option' in k) children.push(k.option);
    if ('list' in k) children.push(k.list);
    if ('tuple' in k) children.push(...k.tuple.types);
    if ('record' in k) children.push(...k.record.fields.map((f) => f.type));
    if ('variant' in k) children.push(...k.variant.cases.filter((c) => c.type != null).map((c) => c.type));
    if (named.has(ref)) {
      if (done.has(ref)) return;
      done.add(ref);
      children.forEach(visit);
      order.push(ref);
    } else {
      children.forEach(visit);
    }
  };
  for (const id of [...named.keys()].sort((a, b) => a - b)) visit(id);
  for (const id of order) out.push(`S.${named.get(id)} = ${shapeOf(id)};`);
  out.push('');
  out.push(`/** Reads a value the engine gave: 64-bit integers as numbers, none as undefined. */
export function lift(v, s) {
  if (s === 0) return v;
  if (s === 'i') return typeof v === 'bigint' ? Number(v) : v;
  switch (s[0]) {
    case 'o':
      return v === null || v === undefined ? undefined : lift(v, s[1]);
    case 'l':
      for (let i = 0; i < v.length; i++) v[i] = lift(v[i], s[1]);
      return v;
    case 'r':
      for (const f in s[1]) v[f] = lift(v[f], s[1][f]);
      return v;
    case 'v':
      if (v.tag in s[1]) v.val = lift(v.val, s[1][v.tag]);
      return v;
    case 't':
      for (let i = 0; i < v.length; i++) v[i] = lift(v[i], s[1][i]);
      return v;
  }
  return v;
}

let bigints = true;

/** Says whether the engine takes 64-bit integers as bigints (SpiderMonkey) or only as numbers (QuickJS). */
export function setBigInts(on) {
  bigints = on;
}

function int64(v) {
  if (typeof v === 'bigint') {
    if (bigints) return v;
    if (v > BigInt(Number.MAX_SAFE_INTEGER) || v < BigInt(Number.MIN_SAFE_INTEGER)) {
      throw new RangeError(\`\${v} does not fit a QuickJS number exactly (at most 2^53)\`);
    }
    return Number(v);
  }
  if (typeof v !== 'number' || !Number.isInteger(v)) throw new TypeError(\`\${String(v)} is not an integer\`);
  return bigints ? BigInt(v) : v;
}

/** Makes a value what the engine takes: a copy where anything changes. */
export function lower(v, s) {
  if (s === 0) return v;
  if (s === 'i') return int64(v);
  switch (s[0]) {
    case 'o':
      return v === null || v === undefined ? undefined : lower(v, s[1]);
    case 'l':
      return Array.from(v, (x) => lower(x, s[1]));
    case 'r': {
      const copy = { ...v };
      for (const f in s[1]) copy[f] = lower(v[f], s[1][f]);
      return copy;
    }
    case 'v':
      return v.tag in s[1] ? { tag: v.tag, val: lower(v.val, s[1][v.tag]) } : v;
    case 't':
      return Array.from(v, (x, i) => lower(x, s[1][i]));
  }
  return v;
}
`);
  for (const iface of imported) {
    const ns = `${camel(iface.name)}$`;
    out.push(doc(iface.docs, '').trimEnd());
    out.push(`export const ${camel(iface.name)} = {`);
    for (const f of Object.values(iface.functions)) {
      const params = f.params.map((p) => camel(p.name));
      const lowered = f.params.map((p) => (shape(p.type) === '0' ? camel(p.name) : `lower(${camel(p.name)}, ${shape(p.type)})`));
      const call = `${ns}.${camel(f.name)}(${lowered.join(', ')})`;
      const r = fnResult(f);
      let body;
      if (r.kind === 'none') body = `{ ${call}; }`;
      else if (r.kind === 'value') body = shape(r.type) === '0' ? `{ return ${call}; }` : `{ return lift(${call}, ${shape(r.type)}); }`;
      else {
        const ok = r.ok == null ? call : shape(r.ok) === '0' ? `return ${call}` : `return lift(${call}, ${shape(r.ok)})`;
        const err = r.err == null ? 'undefined' : `lift(e !== null && typeof e === 'object' && 'payload' in e ? e.payload : e, ${shape(r.err)})`;
        body = `{\n    try {\n      ${ok};\n    } catch (e) {\n      throw new WitError('${f.name}', ${err});\n    }\n  }`;
      }
      out.push(`  ${camel(f.name)}(${params.join(', ')}) ${body},`);
    }
    out.push('};');
    out.push('');
  }
  const handle = Object.values(world.exports).map((e) => e.function).filter(Boolean);
  out.push('/** Shapes of the results of the world\'s exports (their ok values). */');
  out.push('export const EXPORT_RESULTS = {');
  for (const f of handle) {
    const r = fnResult(f);
    const s = r.kind === 'result' ? (r.ok == null ? '0' : shape(r.ok)) : r.kind === 'value' ? shape(r.type) : '0';
    out.push(`  ${camel(f.name)}: ${s},`);
  }
  out.push('};');
  return `${out.join('\n')}\n`;
}

// ---- the schema ---------------------------------------------------------------

// A type as data: a primitive's name ('string', 's64', ...), a named type's
// name ('PodSandbox'), ['option', t], ['list', t], ['tuple', [t...]];
// named types: ['record', [[wit-name, t]...]], ['enum', [case...]],
// ['flags', [flag...]], ['variant', [[case, t or null]...]].
function schemaRef(ref) {
  ref = resolve(ref);
  if (typeof ref === 'string') return `'${ref}'`;
  if (named.has(ref)) return `'${named.get(ref)}'`;
  const k = wit.types[ref].kind;
  if ('option' in k) return `['option', ${schemaRef(k.option)}]`;
  if ('list' in k) return `['list', ${schemaRef(k.list)}]`;
  if ('tuple' in k) return `['tuple', [${k.tuple.types.map(schemaRef).join(', ')}]]`;
  throw new Error(`no schema for ${JSON.stringify(k)}`);
}

function emitSchema() {
  const out = [
    '// Code generated by guest-sdk/js/tools/witgen.mjs --schema from the WIT',
    `// package ${packageOf(wit.interfaces[0])}, world ${worldName}. DO NOT EDIT.`,
    '//',
    '// Every named type of the world as data, for the native test support',
    "// (testing.mjs): a primitive's name, a named type's name, ['option', t],",
    "// ['list', t], ['tuple', [t...]]; named types are ['record', [[field, t]...]],",
    "// ['enum', [case...]], ['flags', [flag...]] or ['variant', [[case, t|null]...]],",
    '// with the WIT names.',
    '',
    'export const TYPES = {',
  ];
  for (const [id, name] of named) {
    const k = wit.types[id].kind;
    let body;
    if ('record' in k) body = `['record', [${k.record.fields.map((f) => `['${f.name}', ${schemaRef(f.type)}]`).join(', ')}]]`;
    else if ('enum' in k) body = `['enum', [${k.enum.cases.map((c) => `'${c.name}'`).join(', ')}]]`;
    else if ('flags' in k) body = `['flags', [${k.flags.flags.map((c) => `'${c.name}'`).join(', ')}]]`;
    else if ('variant' in k) body = `['variant', [${k.variant.cases.map((c) => `['${c.name}', ${c.type == null ? 'null' : schemaRef(c.type)}]`).join(', ')}]]`;
    else throw new Error(`no schema for the named type ${name}: ${JSON.stringify(k)}`);
    out.push(`  ${name}: ${body},`);
  }
  out.push('};');
  return `${out.join('\n')}\n`;
}

process.stdout.write(mode === 'dts' ? emitDts() : mode === 'schema' ? emitSchema() : emitJs());
