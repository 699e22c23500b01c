// @ts-nocheck
// The policy natively (`guest-sdk/js/test.sh example-policies/js/allowed-images`):
// the fixture is containerd 2.3.4's CreateContainer, whose CRI annotation
// names a pinned image of an allowed registry.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { TestEvent, TestHost } from 'nriwasm/testing';
import * as policy from './policy.js';

const SETTINGS = { registries: ['registry.example.com', 'ghcr.io/example'] };
const IMAGE = 'io.kubernetes.cri.image-name';
const PINNED = `registry.example.com/billing/worker@sha256:${'a'.repeat(64)}`;

const event = () => TestEvent.fixture('fixtures/create-container.json');
const host = () => new TestHost().withSettings(SETTINGS);

test('a pinned image of an allowed registry runs', () => {
  assert.deepEqual(host().run(policy, event()).lines(), []);
});

test('an image of another registry is denied', () => {
  const out = host().run(policy, event().withContainerAnnotation(IMAGE, 'docker.io/library/nginx:1.27'));
  assert.equal(
    out.denial(),
    'container worker: image docker.io/library/nginx:1.27 is not from an allowed registry (allowed: registry.example.com, ghcr.io/example)',
  );
});

test('an image by tag is denied unless digests are not required', () => {
  const tagged = event().withContainerAnnotation(IMAGE, 'registry.example.com/billing/worker:1.4.2');
  assert.equal(
    host().run(policy, tagged).denial(),
    'container worker: image registry.example.com/billing/worker:1.4.2 is not pinned by digest (use registry.example.com/billing/worker@sha256:…)',
  );
  const lenient = new TestHost().withSettings({ ...SETTINGS, 'require-digest': false });
  assert.deepEqual(lenient.run(policy, tagged).lines(), []);
});

test('NRI 0.12.2 image field wins over the annotation', () => {
  const e = event().clone();
  e.container.image = { name: `quay.io/other/app@sha256:${'a'.repeat(64)}`, digest: '', configDigest: '' };
  assert.match(host().run(policy, e).denial(), /^container worker: image quay\.io\/other\/app@sha256:a+ is not from an allowed registry/);
  e.container.image = { name: PINNED, digest: `sha256:${'b'.repeat(64)}`, configDigest: '' };
  assert.match(host().run(policy, e).denial(), /the runtime resolved it to sha256:b+, not the pinned digest$/);
});

test('the exception annotation lets a pod through, and is logged', () => {
  const e = event()
    .withContainerAnnotation(IMAGE, 'docker.io/library/nginx:1.27')
    .withPodAnnotation('images.example.com/exception', 'INC-4711');
  const out = host().run(policy, e);
  assert.deepEqual(out.lines(), []);
  assert.ok(out.logged('worker: allowed by exception (INC-4711)'), JSON.stringify(out.logs));
  const empty = e.withPodAnnotation('images.example.com/exception', '');
  assert.match(host().run(policy, empty).denial(), /is not from an allowed registry/);
});

test('settings are checked when the policy loads', () => {
  assert.deepEqual(new TestHost().withSettings({ registries: [] }).configure(policy), {
    err: 'invalid settings: registries is empty, so every image would be refused',
  });
  const url = new TestHost().withSettings({ registries: ['https://registry.example.com'] }).configure(policy);
  assert.equal(url.err, 'invalid settings: registries: "https://registry.example.com" is not a registry host or host/path (e.g. ghcr.io/example)');
  assert.deepEqual(host().configure(policy), { ok: ['create-container'] });
});
