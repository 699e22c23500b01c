// Native tests of a policy: `nriwasm/testing` (loaded through register.mjs).
//
//   import { test } from 'node:test';
//   import assert from 'node:assert/strict';
//   import { TestEvent, TestHost } from 'nriwasm/testing';
//   import * as policy from '../policy.js';
//
//   test('the label becomes a variable', () => {
//     const out = new TestHost().run(policy, TestEvent.fixture('fixtures/create-container.json'));
//     assert.deepEqual(out.lines(), ['env TEAM=payments']);
//   });
//
// The test host does what the host does for a call, on Node: `configure`
// with the settings, then `handle` of the event's kind if the policy
// subscribed to it, with the world's interfaces answered from the event, a
// node view, facts and an in-memory state (committed when the event
// succeeds). Events are read from NRI's protobuf JSON, as `nri-wasm eval
// --input` reads them, and replies are described in the lines `eval`
// prints, so a test's expectation and the host's answer compare directly.
// What it does not do: limits (fuel, time, memory), a chain of several
// policies, and a fresh module per call (check and eval do).
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { enter, leave } from './call.mjs';
import { TYPES } from '../src/schema.js';

/**
 * What the host says of a subscription beyond the policy's declaration:
 * the events `configure` answered that the file `events` of the policy's
 * directory (the current one: test.sh runs there), which build.sh records
 * in the component, does not list; undefined when all are listed, or
 * without the file (the component then declares nothing).
 * @param {string[]} kinds
 * @returns {string | undefined}
 */
function beyondDeclaration(kinds) {
  let text;
  try {
    text = readFileSync('events', 'utf8');
  } catch (e) {
    if (/** @type {any} */ (e).code === 'ENOENT') return undefined;
    throw e;
  }
  const declared = text.split('\n').map((l) => l.replace(/#.*/, '')).join(' ').split(/[\s,]+/).filter(Boolean);
  const undeclared = [...new Set(kinds.filter((k) => !declared.includes(k)))];
  if (undeclared.length === 0) return undefined;
  return `configure subscribes to ${undeclared.join(', ')}, which the file events does not declare (it declares ${declared.join(', ') || 'none'}): add them to events`;
}

// ---- NRI's JSON to the world's records ------------------------------------------

const camel = (name) => name.replace(/-([a-z])/g, (_, c) => c.toUpperCase());
// Field names compared without case and separators: `pod_sandbox_id`,
// `podSandboxId` and `pod-sandbox-id` are one name, as are `CDI_devices`
// and `cdi-devices`.
const norm = (name) => name.toLowerCase().replace(/[-_]/g, '');
const INTS = new Set(['u8', 'u16', 'u32', 'u64', 's8', 's16', 's32', 's64']);

function fail(path, what, v) {
  throw new Error(`${path}: expected ${what}, got ${JSON.stringify(v)}`);
}

/** The zero value of a type: what protobuf's JSON leaves out. */
function zero(t) {
  if (t === 'string') return '';
  if (t === 'bool') return false;
  if (INTS.has(t)) return 0;
  if (Array.isArray(t)) return t[0] === 'list' ? [] : undefined;
  const named = TYPES[t];
  if (named[0] === 'record') return record(undefined, t, t);
  if (named[0] === 'enum') return named[1][0];
  return undefined;
}

/**
 * A value of protobuf's JSON as the world's type `t`: 64-bit integers may
 * be strings, an optional wrapper is `{"value": ...}` (`{}`: present,
 * zero), maps are objects (of the world's key-value lists, sorted by key),
 * enums are names (`CONTAINER_RUNNING`, `IOPRIO_CLASS_RT`) or numbers.
 */
export function fromProto(v, t, path = String(t)) {
  if (v === null || v === undefined) return zero(t);
  if (t === 'string') return typeof v === 'string' ? v : fail(path, 'a string', v);
  if (t === 'bool') return typeof v === 'boolean' ? v : fail(path, 'true or false', v);
  if (INTS.has(t)) {
    const n = typeof v === 'string' && /^-?\d+$/.test(v) ? Number(v) : v;
    return Number.isSafeInteger(n) && (!t.startsWith('u') || n >= 0) ? n : fail(path, `an integer (${t})`, v);
  }
  if (Array.isArray(t)) {
    if (t[0] === 'option') {
      const inner = TYPES[t[1]];
      if (inner && inner[0] === 'record') return record(v, t[1], path);
      // An optional wrapper: OptionalInt, OptionalString, ...
      if (typeof v === 'object' && !Array.isArray(v)) {
        for (const k of Object.keys(v)) if (k !== 'value') fail(path, 'an optional value {"value": ...}', v);
        return v.value === undefined || v.value === null ? zero(t[1]) : fromProto(v.value, t[1], `${path}.value`);
      }
      return fromProto(v, t[1], path);
    }
    if (t[0] === 'list') return list(v, t[1], path);
    throw new Error(`${path}: the type ${JSON.stringify(t)} is not read from NRI's JSON`);
  }
  const named = TYPES[t];
  if (!named) throw new Error(`${path}: unknown type ${t}`);
  if (named[0] === 'record') return record(v, t, path);
  if (named[0] === 'enum') return enumCase(v, named[1], path);
  throw new Error(`${path}: the type ${t} is not read from NRI's JSON`);
}

function record(v, name, path) {
  if (v !== undefined && (typeof v !== 'object' || Array.isArray(v))) fail(path, `an object (${name})`, v);
  const fields = TYPES[name][1];
  const byNorm = new Map(fields.map(([f]) => [norm(f), f]));
  const given = {};
  for (const [k, x] of Object.entries(v ?? {})) {
    const f = byNorm.get(norm(k));
    if (!f) throw new Error(`${path}: unknown field ${JSON.stringify(k)} of ${name} (known: ${fields.map(([n]) => n.replace(/-/g, '_')).join(', ')})`);
    given[f] = x;
  }
  const out = {};
  for (const [f, ft] of fields) out[camel(f)] = fromProto(given[f], ft, `${path}.${f.replace(/-/g, '_')}`);
  return out;
}

function list(v, item, path) {
  if (Array.isArray(v)) {
    return v.map((x, i) => {
      // CDI devices are messages of one field in NRI, strings in the world.
      if (item === 'string' && x && typeof x === 'object' && !Array.isArray(x) && Object.keys(x).length === 1) {
        return fromProto(Object.values(x)[0], item, `${path}[${i}]`);
      }
      return fromProto(x, item, `${path}[${i}]`);
    });
  }
  const entry = TYPES[item];
  if (typeof v === 'object' && entry && entry[0] === 'record' && entry[1].length === 2) {
    // A map: its entries, sorted by key, as records of (key, value).
    const [[kf], [vf, vt]] = entry[1];
    return Object.keys(v).sort().map((k) => {
      const x = v[k];
      const value = x && typeof x === 'object' && !Array.isArray(x) ? x[vf] ?? x[camel(vf)] : x;
      return { [camel(kf)]: k, [camel(vf)]: fromProto(value, vt, `${path}[${JSON.stringify(k)}]`) };
    });
  }
  return fail(path, 'a list', v);
}

function enumCase(v, cases, path) {
  if (typeof v === 'number') return Number.isInteger(v) && v >= 0 && v < cases.length ? cases[v] : fail(path, `one of ${cases.join(', ')}`, v);
  if (typeof v !== 'string') fail(path, `one of ${cases.join(', ')}`, v);
  // NRI's names carry the enum's prefix: CONTAINER_RUNNING is `running`.
  const name = v.toLowerCase().replace(/_/g, '-');
  const found = cases.filter((c) => name === c || name.endsWith(`-${c}`)).sort((a, b) => b.length - a.length)[0];
  return found ?? fail(path, `one of ${cases.join(', ')}`, v);
}

// ---- events ------------------------------------------------------------------

const KINDS = TYPES.Event[1];

/** The world's kind of an NRI RPC name: `CreateContainer` is `create-container`. */
function kindOf(rpc) {
  const kind = rpc.replace(/[A-Z]/g, (c, i) => (i ? '-' : '') + c.toLowerCase());
  if (!KINDS.some(([k]) => k === kind)) {
    throw new Error(`unknown event ${JSON.stringify(rpc)} (known: ${KINDS.map(([k]) => camel(`-${k}`)).join(', ')})`);
  }
  return kind;
}

/** An event as the host shows it to a policy. */
export class TestEvent {
  /** From the world's `event` value: `{ tag: 'create-container', val: { pod, container } }`. */
  constructor(event) {
    this.event = event;
  }

  /** An event in NRI's protobuf JSON: `{"event": "<RPC name>", "request": {...}}`, as `eval --input` reads it. */
  static fromJson(text, what = 'the event') {
    let doc;
    try {
      doc = JSON.parse(text);
    } catch (e) {
      throw new Error(`${what}: ${e.message}`);
    }
    if (!doc || typeof doc !== 'object' || typeof doc.event !== 'string' || !doc.request) {
      throw new Error(`${what}: expected {"event": "<RPC name>", "request": {...}}`);
    }
    for (const k of Object.keys(doc)) if (k !== 'event' && k !== 'request') throw new Error(`${what}: unknown field ${JSON.stringify(k)}`);
    const kind = kindOf(doc.event);
    if (kind === 'synchronize') return new TestEvent({ tag: kind });
    const type = KINDS.find(([k]) => k === kind)[1];
    try {
      return new TestEvent({ tag: kind, val: fromProto(doc.request, type, `${doc.event}Request`) });
    } catch (e) {
      throw new Error(`${what}: ${e.message}`);
    }
  }

  /** The event of a file (a path relative to the working directory: the project's). */
  static fixture(path) {
    const full = resolve(path);
    return TestEvent.fromJson(readFileSync(full, 'utf8'), full);
  }

  /** The event's kind, e.g. 'create-container'. */
  get kind() {
    return this.event.tag;
  }

  /** The pod, to change in place (throws on synchronize). */
  get pod() {
    if (!this.event.val?.pod) throw new Error(`a ${this.kind} event has no pod`);
    return this.event.val.pod;
  }

  /** The container, to change in place (throws on pod events). */
  get container() {
    if (!this.event.val?.container) throw new Error(`a ${this.kind} event has no container`);
    return this.event.val.container;
  }

  /** A copy, for changing one test's event without touching another's. */
  clone() {
    return new TestEvent(structuredClone(this.event));
  }

  /** A copy with a pod label set. */
  withPodLabel(key, value) { return this.edit((e) => setKv(e.pod.labels, key, value)); }
  /** A copy without a pod label. */
  withoutPodLabel(key) { return this.edit((e) => removeKv(e.pod.labels, key)); }
  withPodAnnotation(key, value) { return this.edit((e) => setKv(e.pod.annotations, key, value)); }
  withoutPodAnnotation(key) { return this.edit((e) => removeKv(e.pod.annotations, key)); }
  withContainerLabel(key, value) { return this.edit((e) => setKv(e.container.labels, key, value)); }
  withContainerAnnotation(key, value) { return this.edit((e) => setKv(e.container.annotations, key, value)); }
  withoutContainerAnnotation(key) { return this.edit((e) => removeKv(e.container.annotations, key)); }
  withNamespace(namespace) { return this.edit((e) => { e.pod.namespace = namespace; }); }
  withContainerName(name) { return this.edit((e) => { e.container.name = name; }); }

  /** @private */
  edit(change) {
    const copy = this.clone();
    change(copy);
    return copy;
  }
}

function setKv(list, key, value) {
  removeKv(list, key);
  list.push({ key, value: String(value) });
  list.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

function removeKv(list, key) {
  for (let i = list.length - 1; i >= 0; i--) if (list[i].key === key) list.splice(i, 1);
}

// ---- the host --------------------------------------------------------------------

/** A host for native tests: settings, a node view, facts and the committed state, kept across runs. */
export class TestHost {
  /**
   * No settings, an empty view of 8 CPUs on two NUMA nodes and 16 GiB, an
   * unconfigured runtime (empty strings), node `node-1`, empty state of 1 MiB.
   */
  constructor() {
    this.settings = '';
    this.pods = new Map();
    this.containers = new Map();
    this.topology = {
      onlineCpus: [0, 1, 2, 3, 4, 5, 6, 7],
      numaNodes: [
        { id: 0, cpus: [0, 1, 2, 3], memoryBytes: 8 * 2 ** 30 },
        { id: 1, cpus: [4, 5, 6, 7], memoryBytes: 8 * 2 ** 30 },
      ],
      memoryBytes: 16 * 2 ** 30,
    };
    this.runtime = { name: '', version: '', nriVersion: '' };
    this.node = { hostname: 'node-1', arch: 'x86_64', cpus: 8, memoryBytes: 16 * 2 ** 30 };
    this.state = new Map();
    this.stateLimit = 1024 * 1024;
  }

  /** The settings text `configure` receives (JSON, the policy file's `[settings]`). */
  withSettings(text) {
    this.settings = typeof text === 'string' ? text : JSON.stringify(text);
    return this;
  }

  /** Adds a pod to the node view: `{ id, name, namespace, uid?, labels?, annotations?, containers? }` (labels as an object). */
  withPod(pod) {
    this.pods.set(pod.id, {
      id: pod.id, name: pod.name ?? '', namespace: pod.namespace ?? '', uid: pod.uid ?? '',
      labels: kvs(pod.labels), annotations: kvs(pod.annotations), containers: pod.containers ?? [],
    });
    return this;
  }

  /** Adds a container to the node view: `{ id, podId, name, state?, labels?, annotations?, resources? }`. */
  withContainer(c) {
    this.containers.set(c.id, {
      id: c.id, podId: c.podId ?? '', name: c.name ?? '', state: c.state ?? 'running',
      labels: kvs(c.labels), annotations: kvs(c.annotations), resources: c.resources,
    });
    return this;
  }

  withRuntime(name, version, nriVersion) {
    this.runtime = { name, version, nriVersion };
    return this;
  }

  withState(key, value) {
    this.state.set(key, value);
    return this;
  }

  /** @private */
  call(event) {
    return {
      event, settings: this.settings, runtime: this.runtime, node: this.node,
      view: { pods: this.pods, containers: this.containers, topology: this.topology },
      state: new Map(this.state), stateLimit: this.stateLimit, logs: [],
    };
  }

  /**
   * Runs the policy's `configure` as the host does when it loads the policy:
   * `{ ok: [kinds] }` or `{ err: message }`.
   */
  configure(policy) {
    return this.configureLogged(policy).result;
  }

  /** @private */
  configureLogged(policy) {
    const call = this.call(undefined);
    enter(call);
    try {
      const kinds = policy.configure(this.settings);
      const undeclared = beyondDeclaration(kinds);
      if (undeclared) return { result: { err: undeclared }, logs: call.logs };
      return { result: { ok: kinds }, logs: call.logs };
    } catch (e) {
      return { result: { err: typeof e === 'string' ? e : failure(e) }, logs: call.logs };
    } finally {
      leave();
    }
  }

  /**
   * Runs `event` through `policy` (the module: its `configure` and
   * `handle`) as the host would. Throws if `configure` refuses the
   * settings: the host would not have loaded the policy.
   */
  run(policy, event) {
    const { result: configured, logs } = this.configureLogged(policy);
    if ('err' in configured) {
      throw new Error(`configure rejected the settings ${JSON.stringify(this.settings)}: ${configured.err} (the host would not load the policy)`);
    }
    if (!configured.ok.includes(event.kind)) return new Outcome(event.kind, false, { ok: none() }, logs, this.state);
    const call = this.call(structuredClone(event.event));
    enter(call);
    let result;
    try {
      result = { ok: policy.handle(event.kind) };
    } catch (e) {
      result = typeof e === 'string' ? { err: e } : { failure: failure(e, call.logs) };
    } finally {
      leave();
    }
    if ('ok' in result) this.state = call.state;
    return new Outcome(event.kind, true, result, [...logs, ...call.logs], this.state);
  }
}

const none = () => ({ adjust: undefined, update: [], evict: [] });

function kvs(obj) {
  return Object.keys(obj ?? {}).sort().map((key) => ({ key, value: String(obj[key]) }));
}

/** What a failed call says: the SDK logged the exception with its stack before failing the call. */
function failure(e, logs = []) {
  const logged = logs.filter((l) => l.level === 'error').map((l) => l.message);
  if (logged.length) return logged.join('\n');
  if (e instanceof Error) return e.stack ?? `${e.name}: ${e.message}`;
  return e && typeof e === 'object' && 'failure' in e ? String(e.failure) : String(e);
}

/** What a call answered, logged and left in the state. */
export class Outcome {
  constructor(kind, called, result, logs, state) {
    this.kind = kind;
    /** Whether the handler was called (the policy subscribed to the kind). */
    this.called = called;
    /** `{ ok: reply }`, `{ err: reason }` (a denial) or `{ failure: message }` (an exception: a bug). */
    this.result = result;
    /** `{ level, message }` lines logged by configure and the handler, in order. */
    this.logs = logs;
    /** The committed state after the call. */
    this.state = new Map(state);
  }

  /** The reply. Throws if the event was denied or the handler failed. */
  reply() {
    if ('ok' in this.result) return this.result.ok;
    if ('err' in this.result) throw new Error(`the policy denied ${this.kind}: ${this.result.err}`);
    throw new Error(`the ${this.kind} handler failed:\n${this.result.failure}`);
  }

  /** The reason of the denial. Throws if the policy did not deny. */
  denial() {
    if ('err' in this.result) return this.result.err;
    if ('ok' in this.result) throw new Error(`the policy did not deny ${this.kind}; it replied ${JSON.stringify(describe(this.result.ok))}`);
    throw new Error(`the ${this.kind} handler failed (it did not deny):\n${this.result.failure}`);
  }

  /** The reply as the lines `nri-wasm eval` prints, sorted. Throws as `reply()` does. */
  lines() {
    return describe(this.reply());
  }

  /** Whether some logged line contains `text`. */
  logged(text) {
    return this.logs.some((l) => l.message.includes(text));
  }
}

// ---- replies as lines ------------------------------------------------------------

// The format of `nri-wasm eval` and the Rust SDK's `testing::describe`:
// one line per thing a reply sets, sorted; lists of strings as Rust's
// debug form (["a", "b"]), absent values `-`, enums their NRI numbers.

const q = (list) => `[${(list ?? []).map((s) => JSON.stringify(s)).join(', ')}]`;
const opt = (v) => (v === undefined || v === null ? '-' : String(v));
const index = (type, v) => TYPES[type][1].indexOf(v);
const HOOK_STAGES = [['prestart', 'prestart'], ['createRuntime', 'createRuntime'], ['createContainer', 'createContainer'],
  ['startContainer', 'startContainer'], ['poststart', 'poststart'], ['poststop', 'poststop']];

/** A reply (the world's record, as a handler returns it) as sorted lines. */
export function describe(reply) {
  const out = [];
  if (reply.adjust) adjustment(reply.adjust, out);
  for (const u of reply.update ?? []) {
    out.push(`update ${u.containerId} ignore_failure=${Boolean(u.ignoreFailure)}`);
    if (u.resources) resources(`update ${u.containerId} resources`, u.resources, out);
  }
  for (const e of reply.evict ?? []) out.push(`evict ${e.containerId} reason=${e.reason}`);
  return out.sort(byCodeUnits);
}

// Rust sorts strings by bytes; for these lines (ASCII names) that is
// JavaScript's order of code units.
function byCodeUnits(a, b) {
  return a < b ? -1 : a > b ? 1 : 0;
}

function adjustment(a, out) {
  for (const kv of a.annotations ?? []) out.push(`annotation ${kv.key}=${kv.value}`);
  for (const m of a.mounts ?? []) out.push(`mount ${m.destination} type=${m.type} source=${m.source} options=${q(m.options)}`);
  for (const kv of a.env ?? []) out.push(`env ${kv.key}=${kv.value}`);
  if (a.hooks) {
    for (const [field, stage] of HOOK_STAGES) {
      (a.hooks[field] ?? []).forEach((h, i) => {
        out.push(`hook ${stage}[${i}] ${h.path} args=${q(h.args)} env=${q(h.env)} timeout=${opt(h.timeout)}`);
      });
    }
  }
  for (const r of a.rlimits ?? []) out.push(`rlimit ${r.type} soft=${r.soft} hard=${r.hard}`);
  for (const d of a.cdiDevices ?? []) out.push(`cdi ${d}`);
  if (a.args?.length) out.push(`args ${q(a.args)}`);
  if (a.linux) linux(a.linux, out);
}

function linux(l, out) {
  for (const d of l.devices ?? []) {
    const mode = d.fileMode === undefined || d.fileMode === null ? '-' : Number(d.fileMode).toString(8);
    out.push(`device ${d.path} type=${d.type} major=${d.major} minor=${d.minor} mode=${mode} uid=${opt(d.uid)} gid=${opt(d.gid)}`);
  }
  if (l.resources) resources('resources', l.resources, out);
  if (l.cgroupsPath) out.push(`cgroups_path=${l.cgroupsPath}`);
  if (l.oomScoreAdj !== undefined && l.oomScoreAdj !== null) out.push(`oom_score_adj=${l.oomScoreAdj}`);
  if (l.ioPriority) out.push(`io_priority class=${index('IoPriorityClass', l.ioPriority.class)} priority=${l.ioPriority.priority}`);
  const s = l.seccompPolicy;
  if (s) {
    out.push(`seccomp default_action=${s.defaultAction} default_errno=${opt(s.defaultErrno)} architectures=${q(s.architectures)} flags=${q(s.flags)} listener_path=${s.listenerPath} listener_metadata=${s.listenerMetadata}`);
    (s.syscalls ?? []).forEach((c, i) => {
      const args = (c.args ?? []).map((a) => `${a.index}:${a.value}:${a.valueTwo}:${a.op}`);
      out.push(`seccomp.syscalls[${i}] names=${q(c.names)} action=${c.action} errno=${opt(c.errnoRet)} args=${q(args)}`);
    });
  }
  for (const n of l.namespaces ?? []) out.push(`namespace ${n.type} path=${n.path}`);
  for (const kv of l.sysctl ?? []) out.push(`sysctl ${kv.key}=${kv.value}`);
  for (const d of l.netDevices ?? []) out.push(`net_device ${d.hostName}=${d.name}`);
  if (l.scheduler) {
    const s2 = l.scheduler;
    const flags = (s2.flags ?? []).map((f) => index('SchedulerFlag', f));
    out.push(`scheduler policy=${index('SchedulerPolicy', s2.policy)} nice=${s2.nice} priority=${s2.priority} flags=[${flags.join(', ')}] runtime=${s2.runtime} deadline=${s2.deadline} period=${s2.period}`);
  }
  if (l.rdt) {
    const r = l.rdt;
    out.push(`rdt clos_id=${opt(r.closId)} schemata=${r.schemata ? q(r.schemata) : '-'} monitoring=${opt(r.enableMonitoring)} remove=${Boolean(r.remove)}`);
  }
  if (l.memoryPolicy) {
    const m = l.memoryPolicy;
    const flags = (m.flags ?? []).map((f) => index('MemoryPolicyFlag', f));
    out.push(`memory_policy mode=${index('MemoryPolicyMode', m.mode)} nodes=${m.nodes} flags=[${flags.join(', ')}]`);
  }
}

function resources(prefix, r, out) {
  const m = r.memory;
  if (m) {
    for (const [name, field] of [['limit', 'limit'], ['reservation', 'reservation'], ['swap', 'swap'], ['kernel', 'kernel'],
      ['kernel_tcp', 'kernelTcp'], ['swappiness', 'swappiness'], ['disable_oom_killer', 'disableOomKiller'], ['use_hierarchy', 'useHierarchy']]) {
      if (m[field] !== undefined && m[field] !== null) out.push(`${prefix}.memory.${name}=${m[field]}`);
    }
  }
  const c = r.cpu;
  if (c) {
    for (const [name, field] of [['shares', 'shares'], ['period', 'period'], ['realtime_period', 'realtimePeriod'], ['quota', 'quota'], ['realtime_runtime', 'realtimeRuntime']]) {
      if (c[field] !== undefined && c[field] !== null) out.push(`${prefix}.cpu.${name}=${c[field]}`);
    }
    if (c.cpus) out.push(`${prefix}.cpu.cpus=${c.cpus}`);
    if (c.mems) out.push(`${prefix}.cpu.mems=${c.mems}`);
  }
  for (const h of r.hugepageLimits ?? []) out.push(`${prefix}.hugepage ${h.pageSize}=${h.limit}`);
  if (r.blockioClass !== undefined && r.blockioClass !== null) out.push(`${prefix}.blockio_class=${r.blockioClass}`);
  if (r.rdtClass !== undefined && r.rdtClass !== null) out.push(`${prefix}.rdt_class=${r.rdtClass}`);
  for (const kv of r.unified ?? []) out.push(`${prefix}.unified ${kv.key}=${kv.value}`);
  (r.devices ?? []).forEach((d, i) => {
    out.push(`${prefix}.devices[${i}] allow=${Boolean(d.allow)} type=${d.type} major=${opt(d.major)} minor=${opt(d.minor)} access=${d.access}`);
  });
  if (r.pids) out.push(`${prefix}.pids.limit=${r.pids.limit}`);
}
