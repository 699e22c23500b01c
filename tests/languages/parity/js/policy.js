// @ts-check
// The parity reference policy (see ../README.md), in JavaScript.
import { policy, Adjustment, deny, log, settings, SettingsError } from 'nriwasm';

const KNOWN = ['labels', 'annotations', 'prefix', 'deny-namespaces', 'deny-annotation', 'memory-cap'];

/** @param {string} key */
function sanitize(key) {
  let name = '';
  for (const c of key) name += /^[A-Za-z0-9]$/.test(c) ? c.toUpperCase() : '_';
  return /^[0-9]/.test(name) ? `_${name}` : name;
}

/** @param {string} name */
const validName = (name) => /^[A-Za-z_][A-Za-z0-9_]*$/.test(name);

/** Byte order of keys (the same as code point order for UTF-8). @param {string} a @param {string} b */
const byKey = (a, b) => (a < b ? -1 : a > b ? 1 : 0);

/**
 * @param {Record<string, unknown>} doc
 * @param {string} key
 * @returns {[string, string][]}
 */
function stringsObject(doc, key) {
  const v = doc[key];
  if (v === undefined) return [];
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new SettingsError(`${key}: expected an object of strings`);
  /** @type {[string, string][]} */
  const out = [];
  for (const [k, value] of Object.entries(v)) {
    if (typeof value !== 'string') throw new SettingsError(`${key}: expected an object of strings`);
    out.push([k, value]);
  }
  return out.sort((a, b) => byKey(a[0], b[0]));
}

/** @param {string} text */
function parse(text) {
  /** @type {unknown} */
  let doc = {};
  if (text.trim() !== '') {
    try {
      doc = JSON.parse(text);
    } catch (e) {
      throw new SettingsError(`not JSON: ${e instanceof Error ? e.message : String(e)}`);
    }
  }
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) throw new SettingsError('expected an object');
  const d = /** @type {Record<string, unknown>} */ (doc);
  const unknown = Object.keys(d).sort(byKey).find((k) => !KNOWN.includes(k));
  if (unknown !== undefined) throw new SettingsError(`unknown field ${unknown}`);
  /** @param {string} key @param {string} fallback */
  const string = (key, fallback) => {
    const v = d[key];
    if (v === undefined) return fallback;
    if (typeof v !== 'string') throw new SettingsError(`${key}: expected a string`);
    return v;
  };
  const prefix = string('prefix', 'POD_');
  if (prefix !== '' && !validName(prefix)) throw new SettingsError(`prefix ${prefix} cannot start a variable name`);
  const denyAnnotation = string('deny-annotation', 'parity.example.com/deny');
  /** @type {string[]} */
  let denyNamespaces = [];
  if (d['deny-namespaces'] !== undefined) {
    const v = d['deny-namespaces'];
    if (!Array.isArray(v) || v.some((s) => typeof s !== 'string')) throw new SettingsError('deny-namespaces: expected a list of strings');
    denyNamespaces = v;
  }
  /** @type {number | undefined} */
  let memoryCap;
  if (d['memory-cap'] !== undefined) {
    const v = d['memory-cap'];
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) throw new SettingsError('memory-cap: expected a positive integer');
    memoryCap = v;
  }
  /** @type {{label: boolean, key: string, name: string}[]} */
  const mappings = [];
  for (const [label, what] of /** @type {[boolean, string][]} */ ([[true, 'labels'], [false, 'annotations']])) {
    for (const [key, mapped] of stringsObject(d, what)) {
      const name = mapped === '' ? prefix + sanitize(key) : mapped;
      if (!validName(name)) throw new SettingsError(`${what} ${key}: ${name} is not a variable name`);
      const other = mappings.find((m) => m.name === name);
      if (other) throw new SettingsError(`${other.key} and ${key} would both set ${name}`);
      mappings.push({ label, key, name });
    }
  }
  return { mappings, denyNamespaces, denyAnnotation, memoryCap };
}

// The settings init parsed: found by every call of a pre-initialised
// instance (preinitialize = true), never by a call of one as built.
/** @type {ReturnType<typeof parse> | null} */
let kept = null;

export const { configure, handle } = policy({
  init(text) {
    kept = parse(text);
  },
  on: {
    'create-container'(e) {
      const s = kept ?? parse(settings());
      const pod = e.podMeta();
      const ns = pod?.namespace ?? '';
      const name = pod?.name ?? '';
      if (s.denyNamespaces.includes(ns)) return deny(`pod ${ns}/${name}: namespace ${ns} is not allowed`);
      if (s.denyAnnotation !== '') {
        const v = e.podAnnotation(s.denyAnnotation);
        if (v !== undefined) return deny(`pod ${ns}/${name} is marked ${s.denyAnnotation}=${v}`);
      }
      const a = new Adjustment();
      for (const m of s.mappings) {
        const value = m.label ? e.podLabel(m.key) : e.podAnnotation(m.key);
        if (value === undefined || e.envVar(m.name) !== undefined) continue;
        a.setEnv(m.name, value);
      }
      if (s.memoryCap !== undefined) {
        const limit = e.memoryLimit();
        if (limit === undefined || limit > s.memoryCap) a.setMemoryLimit(s.memoryCap);
      }
      a.setAnnotation('parity.example.com/seen', `${e.podLabels().length}/${e.podAnnotations().length}/${e.env().length}`);
      log('info', `${e.containerMeta()?.name}: ${a.env.length} variables`);
      return a.reply();
    },
  },
});
