"""Write nri-wasm policies in Python.

A policy module registers its handlers on a ``Policy``::

    from nriwasm import Policy, Event, Adjustment, Deny

    policy = Policy()

    @policy.init
    def check(settings: str) -> None:
        ...  # raise SettingsError (or any exception) to refuse the settings

    @policy.on("create-container")
    def create(e: Event):
        if e.container_annotation("example.com/privileged") == "true":
            raise Deny(f"container {e.container_meta().name} asks for privileges")
        return Adjustment().set_annotation("example.com/seen", "yes").reply()

Every event without a handler gets the empty reply. A handler returns a
reply (``none()``, ``Adjustment.reply()``, ``reply(...)``) or denies the
event with ``raise Deny(reason)`` (or ``return deny(reason)``). Any other
exception is a bug, not a denial: the call fails, the host reports the
policy's failure with Python's message, and the policy's on-error setting
decides.

The world's types are the classes componentize-py generates from wit/ when
the policy is built (``wit_world.imports.types``); ``types`` here is that
module.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any, Callable, Dict, Iterable, List, Optional, Union

import wit_world
from componentize_py_types import Err
from wit_world.imports import event as _event
from wit_world.imports import host as _host
from wit_world.imports import node, state, types

__all__ = [
    "Adjustment", "Deny", "Event", "EventKind", "LogLevel", "Policy", "PolicyFailure", "SettingsError", "WitWorld",
    "adjust", "deny", "evict", "list_setting", "log", "lookup", "node", "none", "reply", "resources",
    "settings", "settings_json", "state", "types", "update",
]

EventKind = types.EventKind
LogLevel = types.LogLevel

# ---- answers -------------------------------------------------------------------


class Deny(Exception):
    """Denies the event with its reason: raise it, or return ``deny(reason)``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = str(reason)


def deny(reason: str) -> Deny:
    """A denial to return from a handler."""
    return Deny(reason)


def none() -> types.Reply:
    """The empty reply: it changes nothing."""
    return types.Reply(adjust=None, update=[], evict=[])


def reply(adjust: Union["Adjustment", types.ContainerAdjustment, None] = None,
          update: Optional[List[types.ContainerUpdate]] = None,
          evict: Optional[List[types.ContainerEviction]] = None) -> types.Reply:
    """A reply from its parts."""
    if isinstance(adjust, Adjustment):
        adjust = adjust.build()
    return types.Reply(adjust=adjust, update=list(update or []), evict=list(evict or []))


def adjust(adjustment: Union["Adjustment", types.ContainerAdjustment]) -> types.Reply:
    """A reply that adjusts the container being created."""
    return reply(adjust=adjustment)


def resources() -> types.LinuxResources:
    """Empty Linux resources, to fill in."""
    return types.LinuxResources(memory=None, cpu=None, hugepage_limits=[], blockio_class=None, rdt_class=None,
                                unified=[], devices=[], pids=None)


def update(container_id: str, res: types.LinuxResources, ignore_failure: bool = False) -> types.ContainerUpdate:
    """An update of another container's resources."""
    return types.ContainerUpdate(container_id=container_id, resources=res, ignore_failure=ignore_failure)


def evict(container_id: str, reason: str) -> types.ContainerEviction:
    """An eviction of a container."""
    return types.ContainerEviction(container_id=container_id, reason=str(reason))


HOOK_STAGES = ("prestart", "create_runtime", "create_container", "start_container", "poststart", "poststop")


class Adjustment:
    """Builds a container adjustment; every method returns the adjustment."""

    def __init__(self) -> None:
        self.annotations: List[types.KeyValue] = []
        self.mounts: List[types.Mount] = []
        self.env: List[types.KeyValue] = []
        self.hooks: Optional[types.Hooks] = None
        self.linux: Optional[types.LinuxContainerAdjustment] = None
        self.rlimits: List[types.PosixRlimit] = []
        self.cdi_devices: List[str] = []
        self.args: List[str] = []

    def is_empty(self) -> bool:
        return not (self.annotations or self.mounts or self.env or self.hooks or self.linux or self.rlimits
                    or self.cdi_devices or self.args)

    def set_annotation(self, key: str, value: str) -> "Adjustment":
        self.annotations.append(types.KeyValue(key=key, value=str(value)))
        return self

    def remove_annotation(self, key: str) -> "Adjustment":
        return self.set_annotation("-" + key, "")

    def set_env(self, name: str, value: str) -> "Adjustment":
        self.env.append(types.KeyValue(key=name, value=str(value)))
        return self

    def remove_env(self, name: str) -> "Adjustment":
        return self.set_env("-" + name, "")

    def add_mount(self, destination: str, source: str = "", type: str = "",
                  options: Iterable[str] = ()) -> "Adjustment":
        """Adds (or replaces, by destination) a mount."""
        self.mounts.append(types.Mount(destination=destination, type=type, source=source, options=list(options)))
        return self

    def remove_mount(self, destination: str) -> "Adjustment":
        return self.add_mount("-" + destination)

    def set_rlimit(self, kind: str, soft: int, hard: int) -> "Adjustment":
        """Sets a POSIX resource limit, e.g. ``set_rlimit("RLIMIT_NOFILE", 1024, 4096)``."""
        self.rlimits.append(types.PosixRlimit(type=kind, hard=hard, soft=soft))
        return self

    def add_cdi_device(self, name: str) -> "Adjustment":
        self.cdi_devices.append(name)
        return self

    def set_args(self, args: Iterable[str]) -> "Adjustment":
        """Replaces the container's arguments."""
        self.args = [""] + list(args)
        return self

    def add_hook(self, stage: str, path: str, args: Iterable[str] = (), env: Iterable[str] = (),
                 timeout: Optional[int] = None) -> "Adjustment":
        """Adds an OCI hook at ``stage`` (one of HOOK_STAGES)."""
        if stage not in HOOK_STAGES:
            raise ValueError(f"unknown hook stage {stage}")
        if self.hooks is None:
            self.hooks = types.Hooks(prestart=[], create_runtime=[], create_container=[], start_container=[],
                                     poststart=[], poststop=[])
        getattr(self.hooks, stage).append(types.Hook(path=path, args=list(args), env=list(env), timeout=timeout))
        return self

    def linux_part(self) -> types.LinuxContainerAdjustment:
        """The Linux part of the adjustment, created on first use."""
        if self.linux is None:
            self.linux = types.LinuxContainerAdjustment(
                devices=[], resources=None, cgroups_path="", oom_score_adj=None, io_priority=None,
                seccomp_policy=None, namespaces=[], sysctl=[], net_devices=[], scheduler=None, rdt=None,
                memory_policy=None)
        return self.linux

    def resources(self) -> types.LinuxResources:
        """The resources of the adjustment, created on first use."""
        linux = self.linux_part()
        if linux.resources is None:
            linux.resources = resources()
        return linux.resources

    def _memory(self) -> types.LinuxMemory:
        r = self.resources()
        if r.memory is None:
            r.memory = types.LinuxMemory(limit=None, reservation=None, swap=None, kernel=None, kernel_tcp=None,
                                         swappiness=None, disable_oom_killer=None, use_hierarchy=None)
        return r.memory

    def _cpu(self) -> types.LinuxCpu:
        r = self.resources()
        if r.cpu is None:
            r.cpu = types.LinuxCpu(shares=None, quota=None, period=None, realtime_runtime=None,
                                   realtime_period=None, cpus="", mems="")
        return r.cpu

    def add_device(self, path: str, kind: str, major: int, minor: int, file_mode: Optional[int] = None,
                   uid: Optional[int] = None, gid: Optional[int] = None) -> "Adjustment":
        """Adds (or replaces, by path) a device node."""
        self.linux_part().devices.append(types.LinuxDevice(path=path, type=kind, major=major, minor=minor,
                                                           file_mode=file_mode, uid=uid, gid=gid))
        return self

    def set_memory_limit(self, limit: int) -> "Adjustment":
        self._memory().limit = limit
        return self

    def set_cpu_shares(self, shares: int) -> "Adjustment":
        self._cpu().shares = shares
        return self

    def set_cpu_quota(self, quota: int, period: int) -> "Adjustment":
        cpu = self._cpu()
        cpu.quota, cpu.period = quota, period
        return self

    def set_cpuset(self, cpus: str) -> "Adjustment":
        self._cpu().cpus = cpus
        return self

    def set_pids_limit(self, limit: int) -> "Adjustment":
        self.resources().pids = types.LinuxPids(limit=limit)
        return self

    def set_oom_score_adj(self, value: int) -> "Adjustment":
        self.linux_part().oom_score_adj = value
        return self

    def set_unified(self, file: str, value: str) -> "Adjustment":
        self.resources().unified.append(types.KeyValue(key=file, value=str(value)))
        return self

    def set_sysctl(self, key: str, value: str) -> "Adjustment":
        self.linux_part().sysctl.append(types.KeyValue(key=key, value=str(value)))
        return self

    def build(self) -> types.ContainerAdjustment:
        """The adjustment as the world's record."""
        return types.ContainerAdjustment(annotations=self.annotations, mounts=self.mounts, env=self.env,
                                         hooks=self.hooks, linux=self.linux, rlimits=self.rlimits,
                                         cdi_devices=self.cdi_devices, args=self.args)

    def reply(self) -> types.Reply:
        """A reply with this adjustment, or the empty reply if it changes nothing."""
        return none() if self.is_empty() else adjust(self)


# ---- reading the event --------------------------------------------------------------


def lookup(pairs: Iterable[types.KeyValue], key: str) -> Optional[str]:
    """The value of ``key`` in a list of key-value pairs (a map of the world), or None."""
    for kv in pairs:
        if kv.key == key:
            return kv.value
    return None


_MISSING = object()


class Event:
    """The event a handler handles, read from the host on demand.

    Each read asks the host once and keeps the answer; a lookup
    (``pod_label``, ...) answers from the whole pod or container once that
    was read.
    """

    def __init__(self, kind: types.EventKind) -> None:
        self.kind = kind
        self._cache: Dict[str, Any] = {}

    def _once(self, name: str, read: Callable[[], Any]) -> Any:
        value = self._cache.get(name, _MISSING)
        if value is _MISSING:
            value = read()
            self._cache[name] = value
        return value

    def whole(self) -> types.Event:
        """The whole event: the costliest read, the only one for what only some events carry."""
        return self._once("whole", _event.whole)

    def pod(self) -> Optional[types.PodSandbox]:
        return self._once("pod", _event.pod)

    def container(self) -> Optional[types.Container]:
        return self._once("container", _event.container)

    def pod_meta(self) -> Optional[_event.PodMeta]:
        """The pod's id, name, uid, namespace, runtime handler and pid (None on synchronize)."""
        return self._once("pod_meta", _event.pod_metadata)

    def container_meta(self) -> Optional[_event.ContainerMeta]:
        """The container's id, pod id, name, state and pid (None on pod events)."""
        return self._once("container_meta", _event.container_metadata)

    def pod_label(self, key: str) -> Optional[str]:
        pod = self._cache.get("pod")
        return lookup(pod.labels, key) if pod else _event.pod_label(key)

    def pod_annotation(self, key: str) -> Optional[str]:
        pod = self._cache.get("pod")
        return lookup(pod.annotations, key) if pod else _event.pod_annotation(key)

    def container_label(self, key: str) -> Optional[str]:
        c = self._cache.get("container")
        return lookup(c.labels, key) if c else _event.container_label(key)

    def container_annotation(self, key: str) -> Optional[str]:
        c = self._cache.get("container")
        return lookup(c.annotations, key) if c else _event.container_annotation(key)

    def env_var(self, name: str) -> Optional[str]:
        """The value of one environment variable of the container (of the first NAME=)."""
        c = self._cache.get("container")
        env = c.env if c else self._cache.get("env")
        if env is None:
            return _event.container_env_var(name)
        prefix = name + "="
        for entry in env:
            if entry.startswith(prefix):
                return entry[len(prefix):]
        return None

    def pod_labels(self) -> List[types.KeyValue]:
        """Every pod label, sorted by key."""
        pod = self._cache.get("pod")
        return self._once("pod_labels", lambda: pod.labels if pod else _event.pod_labels())

    def pod_annotations(self) -> List[types.KeyValue]:
        pod = self._cache.get("pod")
        return self._once("pod_annotations", lambda: pod.annotations if pod else _event.pod_annotations())

    def container_labels(self) -> List[types.KeyValue]:
        c = self._cache.get("container")
        return self._once("container_labels", lambda: c.labels if c else _event.container_labels())

    def container_annotations(self) -> List[types.KeyValue]:
        c = self._cache.get("container")
        return self._once("container_annotations", lambda: c.annotations if c else _event.container_annotations())

    def env(self) -> List[str]:
        """The container's environment, NAME=value strings in order."""
        c = self._cache.get("container")
        return self._once("env", lambda: c.env if c else _event.container_env())

    def resources(self) -> Optional[types.LinuxResources]:
        """The container's Linux resources (None if none are set)."""
        return self._once("resources", _event.container_resources)

    def requested_resources(self) -> Optional[types.LinuxResources]:
        """On update-container, the resources about to be applied."""
        return self._once("requested", _event.requested_resources)

    def memory_limit(self) -> Optional[int]:
        """The container's memory limit in bytes, or None."""
        r = self.resources()
        return r.memory.limit if r is not None and r.memory is not None else None


# ---- host -------------------------------------------------------------------------------


def settings() -> str:
    """The settings text (what the init check saw)."""
    return _host.settings()


class SettingsError(ValueError):
    """Settings a policy cannot use; the message starts "invalid settings: "."""

    def __init__(self, message: str) -> None:
        super().__init__("invalid settings: " + message)


def settings_json(text: Optional[str] = None, known: Optional[Iterable[str]] = None) -> Dict[str, Any]:
    """The settings as JSON (an operator's ``[settings]`` table reaches a
    policy as JSON); an empty text is ``{}``. With ``known``, a key outside
    it is refused."""
    if text is None:
        text = settings()
    if not text.strip():
        value: Any = {}
    else:
        try:
            value = json.loads(text)
        except ValueError as e:
            raise SettingsError(str(e)) from None
    if not isinstance(value, dict):
        raise SettingsError("expected a table (a JSON object)")
    if known is not None:
        known = list(known)
        for key in value:
            if key not in known:
                raise SettingsError(f"unknown field `{key}`, expected one of " + ", ".join(f"`{k}`" for k in known))
    return value


def list_setting(text: str) -> List[str]:
    """Splits a comma-separated text into trimmed, non-empty items."""
    return [item.strip() for item in text.split(",") if item.strip()]


_LEVELS = {"debug": LogLevel.DEBUG, "info": LogLevel.INFO, "warn": LogLevel.WARN, "error": LogLevel.ERROR}


def log(level: Union[str, types.LogLevel], message: str) -> None:
    """Writes a line to the host's log: level is "debug", "info", "warn" or "error"."""
    if isinstance(level, str):
        level = _LEVELS[level]
    _host.log(level, str(message))


# ---- the world's exports ------------------------------------------------------------------

Handler = Callable[[Event], Any]
_KINDS = {kind.name.lower().replace("_", "-"): kind for kind in EventKind}


def _kind(kind: Union[str, types.EventKind]) -> types.EventKind:
    if isinstance(kind, EventKind):
        return kind
    if kind not in _KINDS:
        raise ValueError(f"unknown event kind {kind}")
    return _KINDS[kind]


class Policy:
    """A policy: an optional settings check and a handler per event kind.

    The SDK's ``WitWorld`` serves the Policy created last.
    """

    def __init__(self) -> None:
        self._init: Optional[Callable[[str], Any]] = None
        self._handlers: Dict[types.EventKind, Handler] = {}
        global _current
        _current = self

    def init(self, check: Callable[[str], Any]) -> Callable[[str], Any]:
        """Registers the settings check (a decorator): raising refuses the settings."""
        self._init = check
        return check

    def on(self, kind: Union[str, types.EventKind]) -> Callable[[Handler], Handler]:
        """Registers the handler of an event kind (a decorator)."""
        k = _kind(kind)

        def register(handler: Handler) -> Handler:
            self._handlers[k] = handler
            return handler

        return register

    def events(self) -> List[types.EventKind]:
        return sorted(self._handlers, key=lambda k: k.value)


_current: Optional[Policy] = None


def _where(filename: str) -> str:
    # A file as the author names it: relative to the directory of the
    # search path it was found in (in the component those are mounts such
    # as /1, which mean nothing to the author).
    for base in sorted((p.rstrip("/") for p in sys.path if p), key=len, reverse=True):
        if filename.startswith(base + "/"):
            return filename[len(base) + 1:]
    return filename


def _traceback(where: str, e: BaseException) -> str:
    """Python's traceback of ``e`` from the author's code: the SDK's own
    frames (the export that called the handler, its helpers) left out."""
    sdk = os.path.dirname(os.path.abspath(__file__)) + os.sep
    lines = [f"{where} raised an exception:"]
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not os.path.abspath(f.filename).startswith(sdk)]
    if frames:
        lines.append("Traceback (most recent call last):")
    for frame in frames:
        lines.append(f'  File "{_where(frame.filename)}", line {frame.lineno}, in {frame.name}')
        if frame.line:
            lines.append(f"    {frame.line.strip()}")
    lines.extend(line.rstrip("\n") for line in traceback.format_exception_only(type(e), e))
    return "\n".join(lines)


def _fail(where: str, e: BaseException) -> None:
    # A bug, not a denial: the traceback from the author's file goes to
    # stderr (the host logs it, and reports its end with the failure), then
    # the call traps. Letting the exception out would have componentize-py
    # print its own traceback, through the SDK's frames, and a panic of its
    # runtime. Natively, in the SDK's test host, it is raised as
    # PolicyFailure instead.
    text = _traceback(where, e)
    if sys.platform == "wasi":
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
        os.abort()
    raise PolicyFailure(text) from None


class PolicyFailure(BaseException):
    """A bug in the policy (not an ``Err``), as the SDK's test host reports
    it: the traceback from the author's file."""


def _handler_name(kind: types.EventKind) -> str:
    """How a failure names the handler of `kind` (built only when one fails)."""
    return f"the {kind.name.lower().replace('_', '-')} handler"


class WitWorld(wit_world.WitWorld):
    """The world's exports, serving the registered Policy."""

    def configure(self, settings: str) -> List[types.EventKind]:
        p = _current
        if p is None:
            raise Err("the policy module created no nriwasm.Policy")
        if p._init is not None:
            try:
                result = p._init(settings)
            except Deny as d:
                raise Err(d.reason) from None
            except Exception as e:
                raise Err(str(e)) from None
            if isinstance(result, (str, Deny)):
                raise Err(result.reason if isinstance(result, Deny) else result)
        return p.events()

    def handle(self, kind: types.EventKind) -> types.Reply:
        p = _current
        handler = p._handlers.get(kind) if p is not None else None
        if handler is None:
            return none()
        try:
            answer = handler(Event(kind))
        except Deny as d:
            raise Err(d.reason) from None
        except Exception as e:
            _fail(_handler_name(kind), e)
            raise
        if isinstance(answer, Deny):
            raise Err(answer.reason)
        if isinstance(answer, Adjustment):
            return answer.reply()
        if answer is None:
            return none()
        if not isinstance(answer, types.Reply):
            _fail(_handler_name(kind), TypeError(f"returned a {type(answer).__name__}, not a reply"))
        return answer
