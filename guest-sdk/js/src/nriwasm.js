// Write nri-wasm policies in JavaScript (or TypeScript).
//
// A policy module exports the world's two functions, made by `policy`:
//
//   import { policy, Adjustment, deny } from 'nriwasm';
//
//   export const { configure, handle } = policy({
//     // Optional: checks the settings when the host loads the policy.
//     // Throwing keeps the policy from loading, with the error's message.
//     init(settings) {},
//     on: {
//       'create-container'(e) {
//         if (e.containerAnnotation('example.com/privileged') === 'true') {
//           return deny(`container ${e.containerMeta().name} asks for privileges`);
//         }
//         return new Adjustment().setAnnotation('example.com/seen', 'yes').reply();
//       },
//     },
//   });
//
// Every event without a handler gets the empty reply. A handler returns a
// reply (`none()`, `adjustment.reply()`, `reply({...})`) or `deny(reason)`
// (it may also throw the denial). Any other exception is a bug, not a
// denial: the call fails and the host reports the policy's failure with
// the exception's message, and the policy's on-error setting decides.
//
// The same source builds with either engine (guest-sdk/js/build.sh
// --engine quickjs|spidermonkey): every value a policy reads has the same
// form on both, as types/world.d.ts describes (64-bit integers are
// numbers, exact up to 2^53; an absent option is `undefined`).

import * as rawHost from 'nri-wasm:policy/host@0.3.0';
import { event, host, lift, lower, node, setBigInts, state, EXPORT_RESULTS, S, WitError } from './world.js';

export { event as rawEvent, host, node, state, lift, lower, S, WitError };

/** The engine the bundle was built for: 'quickjs' or 'spidermonkey'. */
// eslint-disable-next-line no-undef
export const ENGINE = typeof __NRI_WASM_ENGINE__ === 'string' ? __NRI_WASM_ENGINE__ : 'spidermonkey';
setBigInts(ENGINE === 'spidermonkey');

/** Every event kind, in the world's order. */
export const EVENT_KINDS = Object.freeze([
  'run-pod-sandbox', 'stop-pod-sandbox', 'remove-pod-sandbox', 'create-container',
  'post-create-container', 'start-container', 'post-start-container', 'update-container',
  'post-update-container', 'stop-container', 'remove-container', 'update-pod-sandbox',
  'post-update-pod-sandbox', 'validate-container-adjustment', 'synchronize',
]);

// ---- answers -------------------------------------------------------------------

/** A handler's answer that denies the event; also throwable. */
export class Denial {
  constructor(reason) {
    this.reason = String(reason);
  }
}

/** Denies the event with `reason` (return it, or throw it). */
export function deny(reason) {
  return new Denial(reason);
}

/** The empty reply: it changes nothing. */
export function none() {
  return { adjust: undefined, update: [], evict: [] };
}

/**
 * A reply from its parts: `{ adjust?: Adjustment | ContainerAdjustment,
 * update?: ContainerUpdate[], evict?: ContainerEviction[] }`.
 */
export function reply(parts = {}) {
  const a = parts.adjust;
  return {
    adjust: a instanceof Adjustment ? a.build() : a,
    update: parts.update ?? [],
    evict: parts.evict ?? [],
  };
}

/** A reply that adjusts the container being created. */
export function adjust(adjustment) {
  return reply({ adjust: adjustment });
}

/** An update of another container's resources (see `resources()` for the record). */
export function update(containerId, resources, ignoreFailure = false) {
  return { containerId, resources, ignoreFailure };
}

/** An eviction of a container. */
export function evict(containerId, reason) {
  return { containerId, reason: String(reason) };
}

/** Empty Linux resources, to fill in. */
export function resources() {
  return {
    memory: undefined, cpu: undefined, hugepageLimits: [], blockioClass: undefined, rdtClass: undefined,
    unified: [], devices: [], pids: undefined,
  };
}

/** The OCI hook stages, as `Hooks` names them. */
export const HOOK_STAGES = Object.freeze(['prestart', 'createRuntime', 'createContainer', 'startContainer', 'poststart', 'poststop']);

/** Builds a container adjustment; every method returns the adjustment. */
export class Adjustment {
  constructor() {
    this.annotations = [];
    this.mounts = [];
    this.env = [];
    this.hooks = undefined;
    this.linux = undefined;
    this.rlimits = [];
    this.cdiDevices = [];
    this.args = [];
  }

  /** Whether the adjustment changes nothing. */
  isEmpty() {
    const r = this.build();
    return r.annotations.length === 0 && r.mounts.length === 0 && r.env.length === 0 && r.hooks === undefined
      && r.linux === undefined && r.rlimits.length === 0 && r.cdiDevices.length === 0 && r.args.length === 0;
  }

  setAnnotation(key, value) {
    this.annotations.push({ key, value: String(value) });
    return this;
  }

  removeAnnotation(key) {
    return this.setAnnotation(`-${key}`, '');
  }

  setEnv(name, value) {
    this.env.push({ key: name, value: String(value) });
    return this;
  }

  removeEnv(name) {
    return this.setEnv(`-${name}`, '');
  }

  /** Adds (or replaces, by destination) a mount: `{ destination, type?, source?, options? }`. */
  addMount(mount) {
    this.mounts.push({
      destination: mount.destination, type: mount.type ?? '', source: mount.source ?? '', options: mount.options ?? [],
    });
    return this;
  }

  removeMount(destination) {
    return this.addMount({ destination: `-${destination}` });
  }

  /** Sets a POSIX resource limit, e.g. `setRlimit('RLIMIT_NOFILE', 1024, 4096)`. */
  setRlimit(type, soft, hard) {
    this.rlimits.push({ type, soft, hard });
    return this;
  }

  addCdiDevice(name) {
    this.cdiDevices.push(name);
    return this;
  }

  /** Replaces the container's arguments. */
  setArgs(args) {
    this.args = ['', ...args];
    return this;
  }

  /** Adds an OCI hook at `stage` (one of HOOK_STAGES): `{ path, args?, env?, timeout? }`. */
  addHook(stage, hook) {
    if (!HOOK_STAGES.includes(stage)) throw new TypeError(`unknown hook stage ${stage}`);
    this.hooks ??= { prestart: [], createRuntime: [], createContainer: [], startContainer: [], poststart: [], poststop: [] };
    this.hooks[stage].push({ path: hook.path, args: hook.args ?? [], env: hook.env ?? [], timeout: hook.timeout });
    return this;
  }

  /** The Linux part of the adjustment, created on first use. */
  linuxPart() {
    this.linux ??= {
      devices: [], resources: undefined, cgroupsPath: '', oomScoreAdj: undefined, ioPriority: undefined,
      seccompPolicy: undefined, namespaces: [], sysctl: [], netDevices: [], scheduler: undefined,
      rdt: undefined, memoryPolicy: undefined,
    };
    return this.linux;
  }

  /** The resources of the adjustment, created on first use. */
  resources() {
    const l = this.linuxPart();
    l.resources ??= resources();
    return l.resources;
  }

  /** Adds (or replaces, by path) a device: `{ path, type, major, minor, fileMode?, uid?, gid? }`. */
  addDevice(device) {
    this.linuxPart().devices.push({ ...device });
    return this;
  }

  setMemoryLimit(bytes) {
    const r = this.resources();
    r.memory ??= {};
    r.memory.limit = bytes;
    return this;
  }

  setCpuShares(shares) {
    this.cpu().shares = shares;
    return this;
  }

  setCpuQuota(quota, period) {
    const c = this.cpu();
    c.quota = quota;
    c.period = period;
    return this;
  }

  setCpuset(cpus) {
    this.cpu().cpus = cpus;
    return this;
  }

  setPidsLimit(limit) {
    this.resources().pids = { limit };
    return this;
  }

  setOomScoreAdj(value) {
    this.linuxPart().oomScoreAdj = value;
    return this;
  }

  /** Sets a cgroup v2 file, e.g. `setUnified('cpu.idle', '1')`. */
  setUnified(file, value) {
    this.resources().unified.push({ key: file, value: String(value) });
    return this;
  }

  setSysctl(key, value) {
    this.linuxPart().sysctl.push({ key, value: String(value) });
    return this;
  }

  /** @private */
  cpu() {
    const r = this.resources();
    r.cpu ??= { cpus: '', mems: '' };
    return r.cpu;
  }

  /** The adjustment as the world's record. */
  build() {
    return {
      annotations: this.annotations, mounts: this.mounts, env: this.env, hooks: this.hooks,
      linux: this.linux, rlimits: this.rlimits, cdiDevices: this.cdiDevices, args: this.args,
    };
  }

  /** A reply with this adjustment, or the empty reply if it changes nothing. */
  reply() {
    return this.isEmpty() ? none() : adjust(this);
  }
}

// ---- reading the event -------------------------------------------------------------

/** The value of `key` in a list of key-value pairs (a map of the world), or undefined. */
export function lookup(list, key) {
  for (const kv of list) {
    if (kv.key === key) return kv.value;
  }
  return undefined;
}

/**
 * The event a handler handles, read from the host on demand. Each read asks
 * the host once and keeps the answer; a lookup (`podLabel`, ...) answers
 * from the whole pod or container once that was read.
 */
export class Event {
  constructor(kind) {
    /** The event's kind, e.g. 'create-container'. */
    this.kind = kind;
    this.cache = new Map();
  }

  /** @private */
  once(name, read) {
    if (!this.cache.has(name)) this.cache.set(name, read());
    return this.cache.get(name);
  }

  /** The whole event: the costliest read, the only one for what only some events carry. */
  whole() { return this.once('whole', event.whole); }
  /** The whole pod (undefined on synchronize). */
  pod() { return this.once('pod', event.pod); }
  /** The whole container (undefined on pod events). */
  container() { return this.once('container', event.container); }
  /** The pod's id, name, uid, namespace, runtimeHandler, pid (undefined on synchronize). */
  podMeta() { return this.once('podMeta', event.podMetadata); }
  /** The container's id, podSandboxId, name, state, pid (undefined on pod events). */
  containerMeta() { return this.once('containerMeta', event.containerMetadata); }

  podLabel(key) {
    const pod = this.cache.get('pod');
    return pod ? lookup(pod.labels, key) : event.podLabel(key);
  }
  podAnnotation(key) {
    const pod = this.cache.get('pod');
    return pod ? lookup(pod.annotations, key) : event.podAnnotation(key);
  }
  containerLabel(key) {
    const c = this.cache.get('container');
    return c ? lookup(c.labels, key) : event.containerLabel(key);
  }
  containerAnnotation(key) {
    const c = this.cache.get('container');
    return c ? lookup(c.annotations, key) : event.containerAnnotation(key);
  }
  /** The value of one environment variable of the container (of the first NAME=). */
  envVar(name) {
    const env = this.cache.get('container')?.env ?? this.cache.get('env');
    if (!env) return event.containerEnvVar(name);
    const prefix = `${name}=`;
    const entry = env.find((e) => e.startsWith(prefix));
    return entry === undefined ? undefined : entry.slice(prefix.length);
  }
  /** Every pod label, sorted by key. */
  podLabels() { return this.once('podLabels', () => this.cache.get('pod')?.labels ?? event.podLabels()); }
  podAnnotations() { return this.once('podAnnotations', () => this.cache.get('pod')?.annotations ?? event.podAnnotations()); }
  containerLabels() { return this.once('containerLabels', () => this.cache.get('container')?.labels ?? event.containerLabels()); }
  containerAnnotations() {
    return this.once('containerAnnotations', () => this.cache.get('container')?.annotations ?? event.containerAnnotations());
  }
  /** The container's environment, NAME=value strings in order. */
  env() { return this.once('env', () => this.cache.get('container')?.env ?? event.containerEnv()); }
  /** The container's Linux resources (undefined if none are set). */
  resources() { return this.once('resources', event.containerResources); }
  /** On update-container, the resources about to be applied. */
  requestedResources() { return this.once('requested', event.requestedResources); }
  /** The container's memory limit in bytes, or undefined. */
  memoryLimit() { return this.resources()?.memory?.limit; }
}

// ---- host ------------------------------------------------------------------------------

/** The settings text (what init checked). */
export function settings() {
  return host.settings();
}

/** Thrown for settings a policy cannot use; its message is what the host reports. */
export class SettingsError extends Error {
  constructor(message) {
    super(`invalid settings: ${message}`);
    this.name = 'SettingsError';
  }
}

/**
 * The settings as JSON (an operator's `[settings]` table reaches a policy as
 * JSON): an empty text is `{}`. With `known`, a key outside it is refused.
 */
export function settingsJson(text = settings(), known = undefined) {
  let value;
  if (text.trim() === '') value = {};
  else {
    try {
      value = JSON.parse(text);
    } catch (e) {
      throw new SettingsError(e instanceof Error ? e.message : String(e));
    }
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new SettingsError('expected a table (a JSON object)');
  }
  if (known) {
    for (const key of Object.keys(value)) {
      if (!known.includes(key)) throw new SettingsError(`unknown field \`${key}\`, expected one of ${known.map((k) => `\`${k}\``).join(', ')}`);
    }
  }
  return value;
}

/** Writes a line to the host's log: level is 'debug', 'info', 'warn' or 'error'. */
export function log(level, message) {
  host.log(level, String(message));
}

/** Splits a comma-separated text into trimmed, non-empty items. */
export function list(text) {
  return text.split(',').map((s) => s.trim()).filter((s) => s !== '');
}

// ---- the world's exports -------------------------------------------------------------

function describe(e) {
  if (e instanceof Error) return `${e.name}: ${e.message}`;
  try {
    return `uncaught ${typeof e === 'object' ? JSON.stringify(e) : String(e)}`;
  } catch {
    return `uncaught ${String(e)}`;
  }
}

// The bundle's line table (written by tools/bundle.mjs from rolldown's
// source map, as globalThis.__nriwasmSources: one JSON string of the
// segments of each line of the bundle with code of the policy's own files,
// as [column from 0, file, line]), parsed on the first failure reported,
// never on the way of an event that succeeds; null without the table
// (native tests) or if it does not parse.
let sources;
function sourceTable() {
  if (sources === undefined) {
    const text = globalThis.__nriwasmSources;
    try {
      sources = typeof text === 'string' ? JSON.parse(text) : null;
    } catch {
      sources = null;
    }
  }
  return sources;
}

// The author's file and line of a place in bundle.js (LINE and COLUMN from
// 1, as both engines name them in a stack's frames), from the line table;
// null for the SDK's code, or without the table.
function place(line, column) {
  const table = sourceTable();
  const segments = table?.lines?.[line];
  if (!segments) return null;
  const at = column === undefined ? Infinity : Number(column) - 1;
  let hit = segments[0];
  for (const s of segments) if (s[0] <= at) hit = s;
  return `${table.files[hit[1]]}:${hit[2]}`;
}

const FRAME = /[^\s(@]*bundle\.js:(\d+)(?::(\d+))?/g;

// Where in the author's source an exception was thrown: the first frame of
// its stack in the policy's own files; '' for a value that is not an Error.
function origin(e) {
  if (!(e instanceof Error) || typeof e.stack !== 'string') return '';
  for (const m of e.stack.matchAll(FRAME)) {
    const at = place(m[1], m[2]);
    if (at) return at;
  }
  return '';
}

// A stack with the frames in the policy's own files named by file:line,
// and the SDK's by its name (the bundle means nothing to the author).
function authorStack(stack) {
  return stack.replace(FRAME, (_, line, column) => place(line, column) ?? 'nriwasm');
}

// Ends the call with a trap that carries what went wrong, so that the host
// reports a failure of the policy (not a denial) with the engine's message.
// The whole story (with the stack) goes to the host's log; the trap carries
// one short line with the place in the author's source, since the host
// keeps the end of stderr (leaving out the runtimes' own wrapping lines,
// see host/src/policy/output.rs) and the engines add their own after it:
// - SpiderMonkey writes what the policy prints to stderr, and traps when an
//   export throws something other than a string;
// - QuickJS has no console and turns every exception into an error result;
//   what it reports is a failed conversion, with the value: an unknown log
//   level makes its runtime abort with "unknown enum case: <text>".
function fail(where, e) {
  const what = `${where} threw ${describe(e)}`.split('\n').join(' ');
  const at = origin(e);
  const line = at ? `${what} (at ${at})` : what;
  const stack = e instanceof Error && e.stack ? `\n${authorStack(e.stack.trimEnd())}` : '';
  try {
    host.log('error', `${line}${stack}`);
  } catch {
    // the log is best effort
  }
  // Clipped in the message, never in the place.
  const room = Math.max(40, 150 - (at ? at.length + 6 : 0));
  const short = (what.length > room ? `${what.slice(0, room - 3)}...` : what) + (at ? ` (at ${at})` : '');
  if (ENGINE === 'quickjs') {
    rawHost.log(short, '');
  } else {
    // eslint-disable-next-line no-console
    console.error(short);
  }
  throw { failure: line };
}

/**
 * The world's exports for a policy: `{ init?(settings), on: { kind: handler } }`.
 * A handler gets an Event and returns a reply or a Denial.
 */
export function policy(spec) {
  const on = spec.on ?? {};
  for (const kind of Object.keys(on)) {
    if (!EVENT_KINDS.includes(kind)) throw new Error(`unknown event kind ${kind}`);
  }
  return {
    configure(text) {
      let result;
      try {
        result = spec.init ? spec.init(text) : undefined;
      } catch (e) {
        if (e instanceof Denial) throw e.reason;
        throw e instanceof Error ? e.message : String(e);
      }
      if (result instanceof Denial) throw result.reason;
      if (typeof result === 'string') throw result;
      return EVENT_KINDS.filter((k) => k in on);
    },
    handle(kind) {
      const handler = on[kind];
      if (!handler) return lower(none(), EXPORT_RESULTS.handle);
      let answer;
      try {
        answer = handler(new Event(kind));
      } catch (e) {
        if (e instanceof Denial) throw e.reason;
        fail(`the ${kind} handler`, e);
      }
      if (answer instanceof Denial) throw answer.reason;
      if (answer instanceof Adjustment) answer = answer.reply();
      try {
        return lower(reply(answer ?? {}), EXPORT_RESULTS.handle);
      } catch (e) {
        fail(`the reply of the ${kind} handler`, e);
      }
      return undefined;
    },
  };
}
