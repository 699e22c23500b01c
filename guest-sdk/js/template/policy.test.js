// @ts-nocheck
// The handlers, natively: `./test.sh` on this machine, no WebAssembly
// build. The test host runs a call as the real one does (`configure` with
// the settings, then the handler), on the same fixture `nri-wasm eval`
// reads, and describes the reply in the lines `eval` prints.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { TestEvent, TestHost } from 'nriwasm/testing';
import * as policy from './policy.js';

/** A CreateContainer as containerd sends it, in NRI's protobuf JSON (`eval --input` reads it too). */
const event = () => TestEvent.fixture('fixtures/create-container.json');

test('the pod label becomes an environment variable', () => {
  assert.deepEqual(new TestHost().run(policy, event()).lines(), ['env TEAM=payments']);
  const out = new TestHost().withSettings({ label: 'app', env: 'APP' }).run(policy, event());
  assert.deepEqual(out.lines(), ['env APP=billing']);
});

test('a pod without the label is refused only when required', () => {
  const unlabelled = event().withoutPodLabel('team');
  assert.deepEqual(new TestHost().run(policy, unlabelled).lines(), []);
  const out = new TestHost().withSettings({ required: true }).run(policy, unlabelled);
  assert.equal(out.denial(), 'pod payments/billing-worker-7f9c5 has no label team');
});

test('settings are checked when the policy loads', () => {
  const bad = new TestHost().withSettings({ env: 'NOT A NAME' }).configure(policy);
  assert.deepEqual(bad, { err: 'invalid settings: env "NOT A NAME" is not a variable name' });
  const typo = new TestHost().withSettings({ lable: 'team' }).configure(policy);
  assert.match(typo.err, /unknown field `lable`/);
  assert.deepEqual(new TestHost().configure(policy), { ok: ['create-container'] });
});
