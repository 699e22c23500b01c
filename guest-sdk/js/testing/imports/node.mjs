// The test host's `node` interface: the view a test gave its TestHost.
import { current } from '../call.mjs';

const view = (fn) => current(`node.${fn}`).view;
const has = (list, wanted) => wanted.every((w) => list.some((kv) => kv.key === w.key && kv.value === w.value));

function matching(filter) {
  const v = view('containers');
  return [...v.containers.values()].filter((c) => {
    if (filter.podId != null && c.podId !== filter.podId) return false;
    if (filter.states?.length && !filter.states.includes(c.state)) return false;
    if (!has(c.labels, filter.labels ?? [])) return false;
    if (filter.podLabels?.length && !has(v.pods.get(c.podId)?.labels ?? [], filter.podLabels)) return false;
    return true;
  }).sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

export function pods() { return [...view('pods').pods.values()]; }
export function pod(id) { return view('pod').pods.get(id); }
export function containers(filter) { return matching(filter); }
export function containerIds(filter) {
  let ids = '';
  const ends = [];
  for (const c of matching(filter)) {
    ids += c.id;
    ends.push(Buffer.byteLength(ids));
  }
  return { ids, ends };
}
export function container(id) { return view('container').containers.get(id); }
export function topology() { return view('topology').topology; }
