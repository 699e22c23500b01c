// The test host's `event` interface: the event of the call in progress
// (index.mjs), read the way the host answers each function.
import { current } from '../call.mjs';

const whole = () => current('event').event;
const pod = () => whole().val?.pod;
const container = () => (whole().tag === 'synchronize' ? undefined : whole().val?.container);
const find = (list, key) => list?.find((kv) => kv.key === key)?.value;

export function whole$() { return whole(); }
export { whole$ as whole };
export function pod$() { return pod(); }
export { pod$ as pod };
export function podMetadata() {
  const p = pod();
  return p && { id: p.id, name: p.name, uid: p.uid, namespace: p.namespace, runtimeHandler: p.runtimeHandler, pid: p.pid };
}
export function podLabel(key) { return find(pod()?.labels, key); }
export function podLabels() { return pod()?.labels ?? []; }
export function podAnnotation(key) { return find(pod()?.annotations, key); }
export function podAnnotations() { return pod()?.annotations ?? []; }
export function container$() { return container(); }
export { container$ as container };
export function containerMetadata() {
  const c = container();
  return c && { id: c.id, podSandboxId: c.podSandboxId, name: c.name, state: c.state, pid: c.pid };
}
export function containerLabel(key) { return find(container()?.labels, key); }
export function containerLabels() { return container()?.labels ?? []; }
export function containerAnnotation(key) { return find(container()?.annotations, key); }
export function containerAnnotations() { return container()?.annotations ?? []; }
export function containerEnv() { return container()?.env ?? []; }
export function containerEnvVar(name) {
  const prefix = `${name}=`;
  const entry = containerEnv().find((e) => e.startsWith(prefix));
  return entry === undefined ? undefined : entry.slice(prefix.length);
}
export function containerResources() { return container()?.linux?.resources; }
export function requestedResources() {
  const e = whole();
  return e.tag === 'update-container' ? e.val.linuxResources : undefined;
}
