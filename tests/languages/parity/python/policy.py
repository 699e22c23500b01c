"""The parity reference policy (see ../README.md), in Python."""

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from nriwasm import Adjustment, Deny, Event, Policy, SettingsError, log, settings

KNOWN = ("labels", "annotations", "prefix", "deny-namespaces", "deny-annotation", "memory-cap")


def sanitize(key: str) -> str:
    name = "".join(c.upper() if c.isascii() and c.isalnum() else "_" for c in key)
    return "_" + name if name[:1].isdigit() else name


def valid_name(name: str) -> bool:
    return (name[:1].isascii() and (name[:1].isalpha() or name[:1] == "_")
            and all(c.isascii() and (c.isalnum() or c == "_") for c in name))


def by_key(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


@dataclass
class Settings:
    mappings: List[Tuple[bool, str, str]]
    deny_namespaces: List[str]
    deny_annotation: str
    memory_cap: Optional[int]


def strings_object(doc: Dict[str, Any], key: str) -> List[Tuple[str, str]]:
    value = doc.get(key)
    if value is None and key not in doc:
        return []
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise SettingsError(f"{key}: expected an object of strings")
    return sorted(value.items(), key=lambda kv: by_key(kv[0]))


def parse(text: str) -> Settings:
    doc: Any = {}
    if text.strip():
        try:
            doc = json.loads(text)
        except ValueError as e:
            raise SettingsError(f"not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise SettingsError("expected an object")
    for k in sorted(doc, key=by_key):
        if k not in KNOWN:
            raise SettingsError(f"unknown field {k}")

    def string(key: str, default: str) -> str:
        if key not in doc:
            return default
        if not isinstance(doc[key], str):
            raise SettingsError(f"{key}: expected a string")
        return doc[key]

    prefix = string("prefix", "POD_")
    if prefix and not valid_name(prefix):
        raise SettingsError(f"prefix {prefix} cannot start a variable name")
    deny_annotation = string("deny-annotation", "parity.example.com/deny")
    deny_namespaces: List[str] = []
    if "deny-namespaces" in doc:
        v = doc["deny-namespaces"]
        if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
            raise SettingsError("deny-namespaces: expected a list of strings")
        deny_namespaces = v
    memory_cap = None
    if "memory-cap" in doc:
        v = doc["memory-cap"]
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v >= 1 << 53:
            raise SettingsError("memory-cap: expected a positive integer")
        memory_cap = v
    mappings: List[Tuple[bool, str, str]] = []
    for label, what in ((True, "labels"), (False, "annotations")):
        for key, mapped in strings_object(doc, what):
            name = mapped or prefix + sanitize(key)
            if not valid_name(name):
                raise SettingsError(f"{what} {key}: {name} is not a variable name")
            for _, other, n in mappings:
                if n == name:
                    raise SettingsError(f"{other} and {key} would both set {name}")
            mappings.append((label, key, name))
    return Settings(mappings, deny_namespaces, deny_annotation, memory_cap)


policy = Policy()


# The settings init parsed: found by every call of a pre-initialised
# instance (preinitialize = true), never by a call of one as built.
_kept: "Settings | None" = None


@policy.init
def check(text: str) -> None:
    global _kept
    _kept = parse(text)


@policy.on("create-container")
def create(e: Event):
    s = _kept if _kept is not None else parse(settings())
    pod = e.pod_meta()
    ns, name = pod.namespace, pod.name
    if ns in s.deny_namespaces:
        raise Deny(f"pod {ns}/{name}: namespace {ns} is not allowed")
    if s.deny_annotation:
        v = e.pod_annotation(s.deny_annotation)
        if v is not None:
            raise Deny(f"pod {ns}/{name} is marked {s.deny_annotation}={v}")
    a = Adjustment()
    for label, key, var in s.mappings:
        value = e.pod_label(key) if label else e.pod_annotation(key)
        if value is None or e.env_var(var) is not None:
            continue
        a.set_env(var, value)
    if s.memory_cap is not None:
        limit = e.memory_limit()
        if limit is None or limit > s.memory_cap:
            a.set_memory_limit(s.memory_cap)
    a.set_annotation("parity.example.com/seen", f"{len(e.pod_labels())}/{len(e.pod_annotations())}/{len(e.env())}")
    log("info", f"{e.container_meta().name}: {len(a.env)} variables")
    return a.reply()
