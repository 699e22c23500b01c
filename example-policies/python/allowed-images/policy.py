"""`allowed-images`, in Python: a container runs only an image from an
allowed registry, pinned by digest, unless its pod carries the exception
annotation.

The image is NRI 0.12.2's field when the runtime sends it, else the CRI
annotation io.kubernetes.cri.image-name (NRI 0.12.0, e.g. containerd
2.3.4). The same policy as example-policies/allowed-images (Rust), held to
the same cases; its README explains the rules.
"""

import json
import re
from dataclasses import dataclass
from typing import List, Optional

from nriwasm import Event, Policy, SettingsError, deny, log, none, settings_json

CRI_IMAGE_NAME = "io.kubernetes.cri.image-name"
KNOWN = ["registries", "require-digest", "exception-annotation"]
DIGEST = re.compile(r"sha256:[0-9a-fA-F]{64}")


@dataclass
class Settings:
    registries: List[str]
    require_digest: bool
    exception: str


def parse_settings(text=None) -> Settings:
    doc = settings_json(text, known=KNOWN)
    if "registries" not in doc:
        raise SettingsError("missing field `registries`")
    registries = doc["registries"]
    if not isinstance(registries, list) or not all(isinstance(r, str) for r in registries):
        raise SettingsError("registries: expected a list of strings")
    require_digest = doc.get("require-digest", True)
    if not isinstance(require_digest, bool):
        raise SettingsError("require-digest: expected true or false")
    exception = doc.get("exception-annotation", "images.example.com/exception")
    if not isinstance(exception, str):
        raise SettingsError("exception-annotation: expected a string")
    if not registries:
        raise SettingsError("registries is empty, so every image would be refused")
    for r in registries:
        if r == "" or r.endswith("/") or "://" in r or "@" in r or " " in r:
            raise SettingsError(f"registries: {json.dumps(r)} is not a registry host or host/path (e.g. ghcr.io/example)")
    if not exception:
        raise SettingsError("exception-annotation is empty")
    return Settings(registries, require_digest, exception)


@dataclass
class Reference:
    host: str
    path: str
    digest: Optional[str]


def parse_reference(reference: str) -> Reference:
    """A reference read as the runtimes read it: registry host, path, digest."""
    rest, at, digest = reference.partition("@")
    first, slash, after = rest.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        host, path = first, after
    else:
        host, path = "docker.io", rest
    name, colon, tag = path.rpartition(":")
    if colon and "/" not in tag:
        path = name
    return Reference(host, path, digest if at else None)


def allows(entry: str, r: Reference) -> bool:
    host, slash, prefix = entry.partition("/")
    if not slash:
        return entry.lower() == r.host.lower()
    if host.lower() != r.host.lower() or not r.path.startswith(prefix):
        return False
    rest = r.path[len(prefix):]
    return rest == "" or rest.startswith("/")


def judge(s: Settings, name: str, resolved: Optional[str]) -> Optional[str]:
    """Why the image is refused, or None."""
    r = parse_reference(name)
    if not any(allows(e, r) for e in s.registries):
        return f"image {name} is not from an allowed registry (allowed: {', '.join(s.registries)})"
    if r.digest is not None and not DIGEST.fullmatch(r.digest):
        return f"image {name}: {json.dumps(r.digest)} is not a sha256 digest"
    if r.digest is None and s.require_digest:
        return f"image {name} is not pinned by digest (use {r.host}/{r.path}@sha256:…)"
    if r.digest is not None and resolved is not None and r.digest.lower() != resolved.lower():
        return f"image {name}: the runtime resolved it to {resolved}, not the pinned digest"
    return None


policy = Policy()


@policy.init
def check(text: str) -> None:
    parse_settings(text)


@policy.on("create-container")
def create_container(e: Event):
    s = parse_settings()
    c = e.container()
    ctr = c.name if c else ""
    image = c.image if c else None
    resolved = None
    if image is not None and image.name:
        name = image.name
        resolved = image.digest or None
    else:
        name = e.container_annotation(CRI_IMAGE_NAME)
        if not name:
            return deny(f"container {ctr}: the runtime names no image, so it cannot be checked")
    why = judge(s, name, resolved)
    if why is None:
        return none()
    reason = e.pod_annotation(s.exception)
    if reason:
        log("info", f"{ctr}: allowed by exception ({reason}): {why}")
        return none()
    return deny(f"container {ctr}: {why}")
