"""`{{name}}`: an nri-wasm policy.

As generated (make it your own): every container of a pod labelled
`team=<value>` gets the environment variable `TEAM=<value>`; with
`"required": true`, a container whose pod has no such label is refused.

Settings are JSON (the `[settings]` table of the policy file an operator
installs as `NN-{{name}}.toml`); every key is optional:

    {"label": "team", "env": "TEAM", "required": false}

The host calls the policy in a fresh instance for every event: nothing a
handler keeps in memory survives to the next call. The init check runs
once, when the host loads the policy, and refuses settings it cannot use;
handlers read the settings again with `settings_json()`.
"""

import json
import re
from dataclasses import dataclass
from typing import Optional

from nriwasm import Adjustment, Deny, Event, Policy, SettingsError, none, settings_json

policy = Policy()


@dataclass
class Settings:
    label: str = "team"
    env: str = "TEAM"
    required: bool = False


def parse_settings(text: Optional[str] = None) -> Settings:
    doc = settings_json(text, known=["label", "env", "required"])
    s = Settings(**{k.replace("-", "_"): v for k, v in doc.items()})
    if not isinstance(s.label, str) or not isinstance(s.env, str):
        raise SettingsError("label and env are strings")
    if not isinstance(s.required, bool):
        raise SettingsError("required: expected true or false")
    if not s.label:
        raise SettingsError("label is empty")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", s.env):
        raise SettingsError(f"env {json.dumps(s.env)} is not a variable name")
    return s


@policy.init
def check(text: str) -> None:
    parse_settings(text)


@policy.on("create-container")
def create_container(e: Event):
    s = parse_settings()
    # One label asked of the host, not the whole pod.
    value = e.pod_label(s.label)
    if value is not None:
        return Adjustment().set_env(s.env, value).reply()
    if s.required:
        pod = e.pod_meta()
        raise Deny(f"pod {pod.namespace}/{pod.name} has no label {s.label}")
    return none()
