// @ts-check
// `deny-host-sockets`, in JavaScript: no container mounts the container
// runtime's or NRI's sockets, the host's root, /proc or /sys, or another
// host path the operator protects.
//
// A bind mount whose host path (its `source`) is a protected path, lies
// beneath one, or is a directory holding one (mounting /run would hand out
// /run/containerd/containerd.sock) denies the container's creation. The
// host's root / is protected only as itself. Per-namespace exceptions let
// the few system pods that need a socket have it. Meant for
// on-error = "fail". The same policy as example-policies/deny-host-sockets
// (Rust), held to the same cases.
import { policy, deny, log, none, settingsJson, SettingsError } from 'nriwasm';

/** What is protected unless the settings say `builtin = false`. */
const BUILTIN = [
  '/', '/proc', '/sys',
  '/run/containerd/containerd.sock', '/var/run/containerd/containerd.sock',
  '/run/nri/nri.sock', '/var/run/nri/nri.sock',
  '/run/crio/crio.sock', '/var/run/crio/crio.sock',
  '/run/docker.sock', '/var/run/docker.sock',
  '/run/containerd/containerd.sock.ttrpc', '/var/run/containerd/containerd.sock.ttrpc',
  '/run/cri-dockerd.sock', '/var/run/cri-dockerd.sock',
];

/** A string quoted as the Rust version writes it. @param {string} s */
const quote = (s) => JSON.stringify(s);

/**
 * The path with `.` and empty components dropped and `..` resolved, as the
 * kernel reads it (symbolic links aside); undefined if it is not absolute.
 * @param {string} path
 */
function normalize(path) {
  if (!path.startsWith('/')) return undefined;
  /** @type {string[]} */
  const parts = [];
  for (const c of path.split('/')) {
    if (c === '' || c === '.') continue;
    if (c === '..') parts.pop();
    else parts.push(c);
  }
  return `/${parts.join('/')}`;
}

/** Whether `path` is `base` or lies beneath it. @param {string} path @param {string} base */
const within = (path, base) => path === base || (path.startsWith(base) && (base === '/' || path.slice(base.length).startsWith('/')));

/** @param {unknown} v @param {string} what */
function strings(v, what) {
  if (!Array.isArray(v) || v.some((s) => typeof s !== 'string')) throw new SettingsError(`${what}: expected a list of strings`);
  return /** @type {string[]} */ (v);
}

/** @param {string} [text] */
function parseSettings(text) {
  const doc = settingsJson(text, ['builtin', 'paths', 'deny-parents', 'exceptions']);
  const builtin = doc.builtin ?? true;
  const denyParents = doc['deny-parents'] ?? true;
  if (typeof builtin !== 'boolean') throw new SettingsError('builtin: expected true or false');
  if (typeof denyParents !== 'boolean') throw new SettingsError('deny-parents: expected true or false');
  const paths = strings(doc.paths ?? [], 'paths');
  const rawExceptions = doc.exceptions ?? {};
  if (rawExceptions === null || typeof rawExceptions !== 'object' || Array.isArray(rawExceptions)) {
    throw new SettingsError('exceptions: expected a table of lists');
  }
  /** @type {Map<string, string[]>} */
  const exceptions = new Map();
  for (const ns of Object.keys(rawExceptions).sort()) {
    exceptions.set(ns, strings(/** @type {Record<string, unknown>} */ (rawExceptions)[ns], `exceptions.${ns}`));
  }
  for (const p of paths) {
    if (normalize(p) === undefined || p.includes('\0')) throw new SettingsError(`paths: ${quote(p)} is not an absolute path`);
  }
  /** @type {string[]} */
  const protectedPaths = [];
  for (const p of [...(builtin ? BUILTIN : []), ...paths.map((p) => /** @type {string} */ (normalize(p)))]) {
    if (!protectedPaths.includes(p)) protectedPaths.push(p);
  }
  if (protectedPaths.length === 0) throw new SettingsError('builtin = false and no paths: nothing would be protected');
  for (const [ns, list] of exceptions) {
    for (const p of list) {
      const n = normalize(p);
      if (p !== '*' && !(n !== undefined && protectedPaths.includes(n))) {
        throw new SettingsError(`exceptions.${ns}: ${quote(p)} is not a protected path (or "*")`);
      }
    }
  }
  return {
    /**
     * Every protected path a mount of host path `source` exposes, in the
     * order they are listed.
     * @param {string} source
     */
    exposes(source) {
      const s = normalize(source);
      if (s === undefined) return [];
      return protectedPaths.filter((p) => (p === '/' ? s === '/' : within(s, p) || (denyParents && within(p, s))));
    },
    /** @param {string} ns @param {string} p */
    excepted(ns, p) {
      // An exception is read as a path, like the paths it names.
      return (exceptions.get(ns) ?? []).some((x) => x === '*' || normalize(x) === p);
    },
  };
}

/**
 * Whether the mount takes a host path (rather than a file system such as
 * proc or tmpfs, whose `source` is just a name).
 * @param {{type: string, options: string[]}} m
 */
const isBind = (m) => m.type === 'bind' || m.type === 'rbind' || m.options.some((o) => o === 'bind' || o === 'rbind');

export const { configure, handle } = policy({
  init(text) {
    parseSettings(text);
  },
  on: {
    'create-container'(e) {
      const s = parseSettings();
      const ns = e.podMeta()?.namespace ?? '';
      // The mounts are in the whole container: one read.
      for (const m of e.container()?.mounts ?? []) {
        if (!isBind(m)) continue;
        const exposed = s.exposes(m.source);
        if (exposed.length === 0) continue;
        // Allowed only if the namespace has an exception for every
        // protected path the mount exposes (/run/containerd holds both of
        // containerd's sockets).
        const p = exposed.find((x) => !s.excepted(ns, x));
        if (p === undefined) {
          log('info', `${e.containerMeta()?.name}: ${m.source} allowed in namespace ${ns}`);
          continue;
        }
        const what = normalize(m.source) === p ? '' : `, which exposes ${p},`;
        return deny(
          `mount of host path ${m.source} at ${m.destination}${what} is not allowed (protected host path; namespace ${ns} has no exception for it)`,
        );
      }
      return none();
    },
  },
});
