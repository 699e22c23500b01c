// @ts-check
// `{{name}}`: an nri-wasm policy.
//
// As generated (make it your own): every container of a pod labelled
// `team=<value>` gets the environment variable `TEAM=<value>`; with
// `"required": true`, a container whose pod has no such label is refused.
//
// Settings are JSON (the `[settings]` table of the policy file an operator
// installs as `NN-{{name}}.toml`); every key is optional:
//
//   {"label": "team", "env": "TEAM", "required": false}
//
// The host calls the policy in a fresh instance for every event: nothing a
// handler keeps in memory survives to the next call. `init` runs once, when
// the host loads the policy, and refuses settings it cannot use; handlers
// read the settings again with `settingsJson()`.
import { policy, deny, none, Adjustment, settings, settingsJson, SettingsError } from 'nriwasm';

// Plain JavaScript that is TypeScript as well: rename this file policy.ts
// and it builds and tests the same.
function parseSettings(text = settings()) {
  const s = settingsJson(text, ['label', 'env', 'required']);
  const label = s.label ?? 'team';
  const env = s.env ?? 'TEAM';
  const required = s.required ?? false;
  if (typeof label !== 'string') throw new SettingsError('label: expected a string');
  if (typeof env !== 'string') throw new SettingsError('env: expected a string');
  if (typeof required !== 'boolean') throw new SettingsError('required: expected true or false');
  if (label === '') throw new SettingsError('label is empty');
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(env)) throw new SettingsError(`env ${JSON.stringify(env)} is not a variable name`);
  return { label, env, required };
}

export const { configure, handle } = policy({
  init(text) {
    parseSettings(text);
  },
  on: {
    'create-container'(e) {
      const s = parseSettings();
      // One label asked of the host, not the whole pod.
      const value = e.podLabel(s.label);
      if (value !== undefined) return new Adjustment().setEnv(s.env, value).reply();
      if (s.required) {
        const pod = e.podMeta();
        return deny(`pod ${pod?.namespace}/${pod?.name} has no label ${s.label}`);
      }
      return none();
    },
  },
});
