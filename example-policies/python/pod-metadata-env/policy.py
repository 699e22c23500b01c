"""`pod-metadata-env`, in Python: selected pod labels and annotations as
environment variables of every container of the pod.

The settings map label and annotation keys to variable names; a key mapped
to "" gets a name made from the key (with the settings' `prefix`): upper
case, every character other than a letter, digit or `_` written as `_`, and
a `_` in front of a leading digit, so `app.kubernetes.io/name` becomes
`POD_APP_KUBERNETES_IO_NAME`. A pod without the label or annotation gets no
variable; a variable the container already sets is left alone unless
`overwrite` is true. Nothing is denied. The same policy as
example-policies/pod-metadata-env (Rust), held to the same cases.
"""

import json
from dataclasses import dataclass
from typing import List

from nriwasm import Adjustment, Event, Policy, SettingsError, log, settings_json

KNOWN = ["labels", "annotations", "prefix", "overwrite"]


def quote(text: str) -> str:
    """A string in double quotes, escaped, as the Rust version writes it."""
    return json.dumps(text, ensure_ascii=False)


def sanitize(key: str) -> str:
    """A variable name from any key: `example.com/owner` -> `EXAMPLE_COM_OWNER`."""
    name = "".join(c.upper() if c.isascii() and c.isalnum() else "_" for c in key)
    return "_" + name if name[:1].isdigit() else name


def valid_name(name: str) -> bool:
    """A portable variable name: a letter or `_`, then letters, digits, `_`."""
    first = name[:1]
    return (first.isascii() and (first.isalpha() or first == "_")
            and all(c.isascii() and (c.isalnum() or c == "_") for c in name))


@dataclass
class Mapping:
    label: bool
    key: str
    name: str


@dataclass
class Settings:
    mappings: List[Mapping]
    overwrite: bool


def parse_settings(text=None) -> Settings:
    doc = settings_json(text, known=KNOWN)
    prefix = doc.get("prefix", "POD_")
    overwrite = doc.get("overwrite", False)
    if not isinstance(prefix, str):
        raise SettingsError("prefix: expected a string")
    if not isinstance(overwrite, bool):
        raise SettingsError("overwrite: expected true or false")
    if prefix and not valid_name(prefix):
        raise SettingsError(f"prefix {quote(prefix)} cannot start a variable name")
    mappings: List[Mapping] = []
    for label, what in ((True, "labels"), (False, "annotations")):
        table = doc.get(what, {})
        if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
            raise SettingsError(f"{what}: expected a table of strings")
        for key in sorted(table, key=lambda k: k.encode()):
            if not key:
                raise SettingsError(f"{what}: an empty key")
            name = table[key] or prefix + sanitize(key)
            if not valid_name(name):
                raise SettingsError(f"{what}.{quote(key)}: {quote(name)} is not a variable name "
                                    "(letters, digits, _; not starting with a digit)")
            for other in mappings:
                if other.name == name:
                    raise SettingsError(f"{quote(key)} and {quote(other.key)} would both set {name}")
            mappings.append(Mapping(label, key, name))
    if not mappings:
        raise SettingsError("no labels or annotations to map, so this policy would do nothing")
    return Settings(mappings, overwrite)


policy = Policy()


@policy.init
def check(text: str) -> None:
    parse_settings(text)


@policy.on("create-container")
def create_container(e: Event):
    s = parse_settings()
    container = e.container_meta().name
    adjust = Adjustment()
    for m in s.mappings:
        value = e.pod_label(m.key) if m.label else e.pod_annotation(m.key)
        if value is None:
            continue
        if "\0" in value:
            log("warn", f"{container}: {m.key} has a NUL byte; {m.name} not set")
            continue
        if not s.overwrite and e.env_var(m.name) is not None:
            log("debug", f"{container}: sets {m.name} itself; left alone")
            continue
        adjust.set_env(m.name, value)
    return adjust.reply()
