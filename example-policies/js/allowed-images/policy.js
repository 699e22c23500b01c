// @ts-check
// `allowed-images`, in JavaScript: a container runs only an image from an
// allowed registry, pinned by digest, unless its pod carries the exception
// annotation. The image is NRI 0.12.2's field when the runtime sends it,
// else the CRI annotation io.kubernetes.cri.image-name (NRI 0.12.0, e.g.
// containerd 2.3.4). The same policy as example-policies/allowed-images
// (Rust), held to the same cases; its README explains the rules.
import { policy, deny, log, none, settingsJson, SettingsError } from 'nriwasm';

const CRI_IMAGE_NAME = 'io.kubernetes.cri.image-name';

/** @param {string} [text] */
function parseSettings(text) {
  const doc = settingsJson(text, ['registries', 'require-digest', 'exception-annotation']);
  if (!('registries' in doc)) throw new SettingsError('missing field `registries`');
  const registries = doc.registries;
  if (!Array.isArray(registries) || registries.some((r) => typeof r !== 'string')) {
    throw new SettingsError('registries: expected a list of strings');
  }
  const requireDigest = doc['require-digest'] ?? true;
  if (typeof requireDigest !== 'boolean') throw new SettingsError('require-digest: expected true or false');
  const exception = doc['exception-annotation'] ?? 'images.example.com/exception';
  if (typeof exception !== 'string') throw new SettingsError('exception-annotation: expected a string');
  if (registries.length === 0) throw new SettingsError('registries is empty, so every image would be refused');
  for (const r of /** @type {string[]} */ (registries)) {
    if (r === '' || r.endsWith('/') || r.includes('://') || r.includes('@') || r.includes(' ')) {
      throw new SettingsError(`registries: ${JSON.stringify(r)} is not a registry host or host/path (e.g. ghcr.io/example)`);
    }
  }
  if (exception === '') throw new SettingsError('exception-annotation is empty');
  return { registries: /** @type {string[]} */ (registries), requireDigest, exception };
}

/**
 * A reference read as the runtimes read it: registry host, path, digest.
 * @param {string} reference
 */
function parseReference(reference) {
  const at = reference.indexOf('@');
  const rest = at < 0 ? reference : reference.slice(0, at);
  const digest = at < 0 ? undefined : reference.slice(at + 1);
  const slash = rest.indexOf('/');
  const first = slash < 0 ? '' : rest.slice(0, slash);
  let host = 'docker.io';
  let path = rest;
  if (slash >= 0 && (first.includes('.') || first.includes(':') || first === 'localhost')) {
    host = first;
    path = rest.slice(slash + 1);
  }
  const colon = path.lastIndexOf(':');
  if (colon >= 0 && !path.slice(colon + 1).includes('/')) path = path.slice(0, colon);
  return { host, path, digest };
}

/** @param {string} d */
const validDigest = (d) => d.startsWith('sha256:') && /^[0-9a-fA-F]{64}$/.test(d.slice(7));

/** @param {string} entry @param {{host: string, path: string}} r */
function allows(entry, r) {
  const slash = entry.indexOf('/');
  if (slash < 0) return entry.toLowerCase() === r.host.toLowerCase();
  const [host, prefix] = [entry.slice(0, slash), entry.slice(slash + 1)];
  if (host.toLowerCase() !== r.host.toLowerCase() || !r.path.startsWith(prefix)) return false;
  const rest = r.path.slice(prefix.length);
  return rest === '' || rest.startsWith('/');
}

/**
 * Why the image is refused, or undefined.
 * @param {ReturnType<typeof parseSettings>} s @param {string} name @param {string | undefined} resolved
 */
function judge(s, name, resolved) {
  const r = parseReference(name);
  if (!s.registries.some((e) => allows(e, r))) {
    return `image ${name} is not from an allowed registry (allowed: ${s.registries.join(', ')})`;
  }
  if (r.digest !== undefined && !validDigest(r.digest)) return `image ${name}: ${JSON.stringify(r.digest)} is not a sha256 digest`;
  if (r.digest === undefined && s.requireDigest) return `image ${name} is not pinned by digest (use ${r.host}/${r.path}@sha256:…)`;
  if (r.digest !== undefined && resolved !== undefined && r.digest.toLowerCase() !== resolved.toLowerCase()) {
    return `image ${name}: the runtime resolved it to ${resolved}, not the pinned digest`;
  }
  return undefined;
}

export const { configure, handle } = policy({
  init(text) {
    parseSettings(text);
  },
  on: {
    'create-container'(e) {
      const s = parseSettings();
      const c = e.container();
      const ctr = c?.name ?? '';
      const image = c?.image;
      let name;
      let resolved;
      if (image && image.name !== '') {
        name = image.name;
        resolved = image.digest === '' ? undefined : image.digest;
      } else {
        name = e.containerAnnotation(CRI_IMAGE_NAME);
        if (!name) return deny(`container ${ctr}: the runtime names no image, so it cannot be checked`);
      }
      const why = judge(s, name, resolved);
      if (why === undefined) return none();
      const reason = e.podAnnotation(s.exception);
      if (reason) {
        log('info', `${ctr}: allowed by exception (${reason}): ${why}`);
        return none();
      }
      return deny(`container ${ctr}: ${why}`);
    },
  },
});
