"""Native tests of a Python policy: no WebAssembly build.

    import unittest
    from nriwasm.testing import TestEvent, TestHost
    import policy  # registers the policy's handlers

    class Tests(unittest.TestCase):
        def test_label(self):
            out = TestHost().run(TestEvent.fixture("fixtures/create-container.json"))
            self.assertEqual(out.lines(), ["env TEAM=payments"])

The project's ``./test.sh`` generates the world's bindings (the
``wit_world`` package componentize-py makes when it builds the component)
once into ``target/bindings`` and runs ``python -m unittest`` with them and
the SDK on the path. The test host does what the host does for a call:
``configure`` with the settings, then ``handle`` of the event's kind if the
policy subscribed to it, with the world's interfaces answered from the
event, a node view, facts and an in-memory state (committed when the event
succeeds). Events are read from NRI's protobuf JSON as ``nri-wasm eval
--input`` reads them, and replies are described in the lines ``eval``
prints, so a test's expectation and the host's answer compare directly.
What it does not do: limits (fuel, time, memory), a chain of several
policies, and a fresh interpreter per call (``check`` and ``eval`` do).
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import json
import os
import re
import typing
from typing import Any, Dict, List, Optional, Union

import nriwasm
from componentize_py_types import Err
from wit_world.imports import event as _event
from wit_world.imports import host as _host
from wit_world.imports import node as _node
from wit_world.imports import state as _state
from wit_world.imports import types

__all__ = ["Outcome", "TestEvent", "TestHost", "describe", "from_proto"]

# ---- NRI's JSON to the world's records -------------------------------------------


def _norm(name: str) -> str:
    """Field names compared without case and separators: ``pod_sandbox_id``,
    ``podSandboxId`` and ``CDI_devices``/``cdi_devices`` are one name each."""
    return name.lower().replace("_", "").replace("-", "")


def _zero(t: Any) -> Any:
    origin = typing.get_origin(t)
    if t is str:
        return ""
    if t is bool:
        return False
    if t is int:
        return 0
    if origin is list:
        return []
    if origin is Union:
        return None
    if isinstance(t, type) and issubclass(t, enum.Enum):
        return next(iter(t))
    if dataclasses.is_dataclass(t):
        return _record(None, t, t.__name__)
    raise TypeError(f"no zero value for {t}")


def from_proto(v: Any, t: Any, path: str = "") -> Any:
    """A value of protobuf's JSON as the world's type ``t`` (a class of
    ``types``, ``List[...]``, ``Optional[...]``): 64-bit integers may be
    strings, an optional wrapper is ``{"value": ...}`` (``{}``: present,
    zero), maps are objects (key-value lists sorted by key), enums are
    names (``CONTAINER_RUNNING``) or numbers."""
    path = path or getattr(t, "__name__", str(t))
    if v is None:
        return _zero(t)
    origin = typing.get_origin(t)
    if origin is Union:
        inner = [a for a in typing.get_args(t) if a is not type(None)][0]
        if dataclasses.is_dataclass(inner):
            return _record(v, inner, path)
        if isinstance(v, dict):  # an optional wrapper: OptionalInt, OptionalString, ...
            if set(v) - {"value"}:
                raise ValueError(f"{path}: expected an optional value {{\"value\": ...}}, got {json.dumps(v)}")
            return from_proto(v.get("value"), inner, f"{path}.value")
        return from_proto(v, inner, path)
    if origin is list:
        return _list(v, typing.get_args(t)[0], path)
    if t is str:
        if not isinstance(v, str):
            raise ValueError(f"{path}: expected a string, got {json.dumps(v)}")
        return v
    if t is bool:
        if not isinstance(v, bool):
            raise ValueError(f"{path}: expected true or false, got {json.dumps(v)}")
        return v
    if t is int:
        if isinstance(v, str) and re.fullmatch(r"-?\d+", v):
            return int(v)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        raise ValueError(f"{path}: expected an integer, got {json.dumps(v)}")
    if isinstance(t, type) and issubclass(t, enum.Enum):
        return _enum(v, t, path)
    if dataclasses.is_dataclass(t):
        return _record(v, t, path)
    raise TypeError(f"{path}: the type {t} is not read from NRI's JSON")


def _record(v: Any, cls: Any, path: str) -> Any:
    if v is not None and not isinstance(v, dict):
        raise ValueError(f"{path}: expected an object ({cls.__name__}), got {json.dumps(v)}")
    hints = typing.get_type_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls)]
    by_norm = {_norm(f): f for f in fields}
    given = {}
    for key, x in (v or {}).items():
        f = by_norm.get(_norm(key))
        if f is None:
            raise ValueError(f"{path}: unknown field {json.dumps(key)} of {cls.__name__} (known: {', '.join(fields)})")
        given[f] = x
    return cls(**{f: from_proto(given.get(f), hints[f], f"{path}.{f}") for f in fields})


def _list(v: Any, item: Any, path: str) -> List[Any]:
    if isinstance(v, list):
        out = []
        for i, x in enumerate(v):
            # CDI devices are messages of one field in NRI, strings in the world.
            if item is str and isinstance(x, dict) and len(x) == 1:
                x = next(iter(x.values()))
            out.append(from_proto(x, item, f"{path}[{i}]"))
        return out
    if isinstance(v, dict) and dataclasses.is_dataclass(item) and len(dataclasses.fields(item)) == 2:
        # A map: its entries, sorted by key, as records of (key, value).
        kf, vf = dataclasses.fields(item)
        vt = typing.get_type_hints(item)[vf.name]
        out = []
        for k in sorted(v):
            x = v[k]
            if isinstance(x, dict):
                x = x.get(vf.name, x.get(_camel(vf.name)))
            out.append(item(**{kf.name: k, vf.name: from_proto(x, vt, f"{path}[{json.dumps(k)}]")}))
        return out
    raise ValueError(f"{path}: expected a list, got {json.dumps(v)}")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.capitalize() for w in rest)


def _enum(v: Any, cls: Any, path: str) -> Any:
    members = list(cls)
    names = ", ".join(m.name for m in members)
    if isinstance(v, int) and not isinstance(v, bool):
        if 0 <= v < len(members):
            return members[v]
    elif isinstance(v, str):
        # NRI's names carry the enum's prefix: CONTAINER_RUNNING is RUNNING.
        name = v.upper()
        found = sorted((m for m in members if name == m.name or name.endswith("_" + m.name)),
                       key=lambda m: -len(m.name))
        if found:
            return found[0]
    raise ValueError(f"{path}: expected one of {names}, got {json.dumps(v)}")


# ---- events ----------------------------------------------------------------------


def _variant(kind: str) -> Any:
    return getattr(types, "Event_" + "".join(w.capitalize() for w in kind.split("-")))


class TestEvent:
    """An event as the host shows it to a policy: ``event`` is the world's
    ``types.Event`` value (e.g. ``types.Event_CreateContainer``)."""

    __test__ = False  # not a test case, for test collectors

    def __init__(self, event: Any) -> None:
        self.event = event

    @staticmethod
    def from_json(text: str, what: str = "the event") -> "TestEvent":
        """An event in NRI's protobuf JSON: ``{"event": "<RPC name>",
        "request": {...}}``, as ``nri-wasm eval --input`` reads it."""
        try:
            doc = json.loads(text)
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("event"), str) or "request" not in doc:
            raise ValueError(f'{what}: expected {{"event": "<RPC name>", "request": {{...}}}}')
        extra = set(doc) - {"event", "request"}
        if extra:
            raise ValueError(f"{what}: unknown field {json.dumps(sorted(extra)[0])}")
        rpc = doc["event"]
        kind = re.sub(r"(?<!^)([A-Z])", r"-\1", rpc).lower()
        known = [k.name.lower().replace("_", "-") for k in types.EventKind]
        if kind not in known:
            raise ValueError(f"{what}: unknown event {json.dumps(rpc)}")
        variant = _variant(kind)
        if kind == "synchronize":
            return TestEvent(variant())
        payload = typing.get_type_hints(variant)["value"]
        try:
            return TestEvent(variant(from_proto(doc["request"], payload, f"{rpc}Request")))
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None

    @staticmethod
    def fixture(path: str) -> "TestEvent":
        """The event of a file (a path relative to the working directory: the project's)."""
        full = os.path.abspath(path)
        with open(full, encoding="utf-8") as f:
            return TestEvent.from_json(f.read(), full)

    @property
    def kind(self) -> types.EventKind:
        name = type(self.event).__name__[len("Event_"):]
        return types.EventKind[re.sub(r"(?<!^)([A-Z])", r"_\1", name).upper()]

    @property
    def pod(self) -> types.PodSandbox:
        """The pod, to change in place (raises on synchronize)."""
        pod = getattr(getattr(self.event, "value", None), "pod", None)
        if pod is None:
            raise ValueError(f"a {self.kind.name} event has no pod")
        return pod

    @property
    def container(self) -> types.Container:
        """The container, to change in place (raises on pod events)."""
        c = getattr(getattr(self.event, "value", None), "container", None)
        if c is None:
            raise ValueError(f"a {self.kind.name} event has no container")
        return c

    def clone(self) -> "TestEvent":
        return TestEvent(copy.deepcopy(self.event))

    def with_pod_label(self, key: str, value: str) -> "TestEvent":
        e = self.clone()
        _set_kv(e.pod.labels, key, value)
        return e

    def without_pod_label(self, key: str) -> "TestEvent":
        e = self.clone()
        e.pod.labels[:] = [kv for kv in e.pod.labels if kv.key != key]
        return e

    def with_pod_annotation(self, key: str, value: str) -> "TestEvent":
        e = self.clone()
        _set_kv(e.pod.annotations, key, value)
        return e

    def without_pod_annotation(self, key: str) -> "TestEvent":
        e = self.clone()
        e.pod.annotations[:] = [kv for kv in e.pod.annotations if kv.key != key]
        return e

    def with_container_annotation(self, key: str, value: str) -> "TestEvent":
        e = self.clone()
        _set_kv(e.container.annotations, key, value)
        return e

    def with_namespace(self, namespace: str) -> "TestEvent":
        e = self.clone()
        e.pod.namespace = namespace
        return e


def _set_kv(pairs: List[types.KeyValue], key: str, value: str) -> None:
    pairs[:] = sorted([kv for kv in pairs if kv.key != key] + [types.KeyValue(key=key, value=str(value))],
                      key=lambda kv: kv.key)


# ---- the host --------------------------------------------------------------------


class _Call:
    """The call in progress: what the fake interfaces answer from."""

    def __init__(self, host: "TestHost", event: Any) -> None:
        self.host = host
        self.event = event
        self.state = dict(host.state)
        self.logs: List[Any] = []


_call: Optional[_Call] = None


def _current(what: str) -> _Call:
    if _call is None:
        raise RuntimeError(f"{what} was called outside a call of the test host (run the policy with TestHost.run)")
    return _call


def _payload(what: str) -> Any:
    e = _current(what).event
    return getattr(e, "value", None)


def _find(pairs: Optional[List[types.KeyValue]], key: str) -> Optional[str]:
    for kv in pairs or []:
        if kv.key == key:
            return kv.value
    return None


def _pod(what: str) -> Any:
    return getattr(_payload(what), "pod", None)


def _container(what: str) -> Any:
    return getattr(_payload(what), "container", None)


def _env_var(name: str) -> Optional[str]:
    c = _container("event.container_env_var")
    prefix = name + "="
    for entry in c.env if c else []:
        if entry.startswith(prefix):
            return entry[len(prefix):]
    return None


def _pod_meta() -> Optional[_event.PodMeta]:
    p = _pod("event.pod_metadata")
    return p and _event.PodMeta(id=p.id, name=p.name, uid=p.uid, namespace=p.namespace,
                                runtime_handler=p.runtime_handler, pid=p.pid)


def _container_meta() -> Optional[_event.ContainerMeta]:
    c = _container("event.container_metadata")
    return c and _event.ContainerMeta(id=c.id, pod_sandbox_id=c.pod_sandbox_id, name=c.name, state=c.state, pid=c.pid)


def _requested() -> Optional[types.LinuxResources]:
    e = _current("event.requested_resources").event
    return e.value.linux_resources if isinstance(e, types.Event_UpdateContainer) else None


def _resources() -> Optional[types.LinuxResources]:
    c = _container("event.container_resources")
    return c.linux.resources if c is not None and c.linux is not None else None


_FAKES = {
    _event: {
        "whole": lambda: copy.deepcopy(_current("event.whole").event),
        "pod": lambda: copy.deepcopy(_pod("event.pod")),
        "pod_metadata": _pod_meta,
        "pod_label": lambda key: _find(getattr(_pod("event.pod_label"), "labels", None), key),
        "pod_labels": lambda: list(getattr(_pod("event.pod_labels"), "labels", [])),
        "pod_annotation": lambda key: _find(getattr(_pod("event.pod_annotation"), "annotations", None), key),
        "pod_annotations": lambda: list(getattr(_pod("event.pod_annotations"), "annotations", [])),
        "container": lambda: copy.deepcopy(_container("event.container")),
        "container_metadata": _container_meta,
        "container_label": lambda key: _find(getattr(_container("event.container_label"), "labels", None), key),
        "container_labels": lambda: list(getattr(_container("event.container_labels"), "labels", [])),
        "container_annotation": lambda key: _find(
            getattr(_container("event.container_annotation"), "annotations", None), key),
        "container_annotations": lambda: list(getattr(_container("event.container_annotations"), "annotations", [])),
        "container_env": lambda: list(getattr(_container("event.container_env"), "env", [])),
        "container_env_var": _env_var,
        "container_resources": _resources,
        "requested_resources": _requested,
    },
    _host: {
        "log": lambda level, message: _current("host.log").logs.append((level, message)),
        "settings": lambda: _current("host.settings").host.settings,
        "runtime": lambda: _current("host.runtime").host.runtime,
        "node": lambda: _current("host.node").host.node,
    },
}


def _matching(f: _node.ContainerFilter) -> List[_node.ContainerInfo]:
    h = _current("node.containers").host

    def has(pairs: List[types.KeyValue], wanted: List[types.KeyValue]) -> bool:
        return all(any(kv.key == w.key and kv.value == w.value for kv in pairs) for w in wanted)

    out = []
    for c in sorted(h.containers.values(), key=lambda c: c.id):
        if f.pod_id is not None and c.pod_id != f.pod_id:
            continue
        if f.states and c.state not in f.states:
            continue
        if not has(c.labels, f.labels):
            continue
        pod = h.pods.get(c.pod_id)
        if f.pod_labels and not has(pod.labels if pod else [], f.pod_labels):
            continue
        out.append(c)
    return out


def _container_ids(f: _node.ContainerFilter) -> _node.IdList:
    ids, ends = "", []
    for c in _matching(f):
        ids += c.id
        ends.append(len(ids.encode()))
    return _node.IdList(ids=ids, ends=ends)


# The host's longest state key.
_MAX_KEY_BYTES = 256
# What each key counts toward the state's limit beside its key and value,
# as the host counts it.
_ENTRY_BYTES = 64


def _state_set(key: str, value: str) -> None:
    call = _current("state.set")
    n = len(key.encode())
    if n == 0 or n > _MAX_KEY_BYTES:
        raise Err(_state.StateError_InvalidKey(f"key of {n} bytes; keys are 1 to {_MAX_KEY_BYTES} bytes"))
    after = dict(call.state)
    after[key] = value
    if sum(len(k.encode()) + len(v.encode()) + _ENTRY_BYTES for k, v in after.items()) > call.host.state_limit:
        raise Err(_state.StateError_LimitExceeded(call.host.state_limit))
    call.state = after


_FAKES[_node] = {
    "pods": lambda: list(_current("node.pods").host.pods.values()),
    "pod": lambda id: _current("node.pod").host.pods.get(id),
    "containers": _matching,
    "container_ids": _container_ids,
    "container": lambda id: _current("node.container").host.containers.get(id),
    "topology": lambda: _current("node.topology").host.topology,
}
_FAKES[_state] = {
    "get": lambda key: _current("state.get").state.get(key),
    "set": _state_set,
    "remove": lambda key: _current("state.remove").state.pop(key, None) is None and None,
    "keys": lambda prefix: sorted(k for k in _current("state.keys").state if k.startswith(prefix)),
}

# The bindings' functions reach the host only inside a component: on this
# machine they answer from the call in progress.
for _module, _functions in _FAKES.items():
    for _name, _fn in _functions.items():
        if not hasattr(_module, _name):
            raise RuntimeError(f"the bindings have no {_module.__name__}.{_name}: the SDK and wit/ disagree")
        setattr(_module, _name, _fn)


def _kvs(d: Optional[Dict[str, str]]) -> List[types.KeyValue]:
    return [types.KeyValue(key=k, value=str(d[k])) for k in sorted(d or {})]


def _kind_name(kind: types.EventKind) -> str:
    return kind.name.lower().replace("_", "-")


def _beyond_declaration(kinds: List[types.EventKind]) -> Optional[str]:
    """What the host says of a subscription beyond the policy's declaration:
    the events ``configure`` answered that the file ``events`` of the
    policy's directory (the current one: test.sh runs there), which
    build.sh records in the component, does not list; None when all are
    listed, or without the file (the component then declares nothing)."""
    try:
        with open("events", encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    declared = [n for n in re.split(r"[\s,]+", " ".join(line.split("#")[0] for line in text.splitlines())) if n]
    undeclared: List[str] = []
    for name in (_kind_name(k) for k in kinds):
        if name not in declared and name not in undeclared:
            undeclared.append(name)
    if not undeclared:
        return None
    return (f"configure subscribes to {', '.join(undeclared)}, which the file events does not declare "
            f"(it declares {', '.join(declared) or 'none'}): add them to events")


class TestHost:
    """A host for native tests: settings, a node view, facts and the
    policy's committed state, kept across the calls it runs. As made: no
    settings, an empty view of 8 CPUs on two NUMA nodes and 16 GiB, an
    unconfigured runtime (empty strings), node ``node-1``, empty state of
    1 MiB."""

    __test__ = False

    def __init__(self) -> None:
        self.settings = ""
        self.pods: Dict[str, _node.PodInfo] = {}
        self.containers: Dict[str, _node.ContainerInfo] = {}
        gib = 1 << 30
        self.topology = _node.NodeTopology(
            online_cpus=list(range(8)),
            numa_nodes=[_node.NumaNode(id=0, cpus=[0, 1, 2, 3], memory_bytes=8 * gib),
                        _node.NumaNode(id=1, cpus=[4, 5, 6, 7], memory_bytes=8 * gib)],
            memory_bytes=16 * gib)
        self.runtime = types.RuntimeInfo(name="", version="", nri_version="")
        self.node = types.NodeInfo(hostname="node-1", arch="x86_64", cpus=8, memory_bytes=16 * gib)
        self.state: Dict[str, str] = {}
        self.state_limit = 1 << 20

    def with_settings(self, settings: Union[str, Dict[str, Any]]) -> "TestHost":
        """The settings text ``configure`` receives (JSON: the policy file's ``[settings]``)."""
        self.settings = settings if isinstance(settings, str) else json.dumps(settings)
        return self

    def with_pod(self, id: str, name: str, namespace: str, labels: Optional[Dict[str, str]] = None,
                 annotations: Optional[Dict[str, str]] = None, containers: Optional[List[str]] = None,
                 uid: str = "") -> "TestHost":
        """Adds a pod to the node view."""
        self.pods[id] = _node.PodInfo(id=id, name=name, namespace=namespace, uid=uid, labels=_kvs(labels),
                                      annotations=_kvs(annotations), containers=list(containers or []))
        return self

    def with_container(self, id: str, pod_id: str, name: str,
                       state: types.ContainerState = types.ContainerState.RUNNING,
                       labels: Optional[Dict[str, str]] = None, annotations: Optional[Dict[str, str]] = None,
                       resources: Optional[types.LinuxResources] = None) -> "TestHost":
        """Adds a container to the node view."""
        self.containers[id] = _node.ContainerInfo(id=id, pod_id=pod_id, name=name, state=state, labels=_kvs(labels),
                                                  annotations=_kvs(annotations), resources=resources)
        return self

    def with_runtime(self, name: str, version: str, nri_version: str) -> "TestHost":
        self.runtime = types.RuntimeInfo(name=name, version=version, nri_version=nri_version)
        return self

    def with_state(self, key: str, value: str) -> "TestHost":
        self.state[key] = value
        return self

    def _enter(self, event: Any) -> _Call:
        global _call
        _call = _Call(self, event)
        return _call

    def configure(self) -> Union[List[types.EventKind], str]:
        """Runs the policy's ``configure`` as the host does when it loads the
        policy: its subscription (a list), or its error (a string)."""
        return self._configure()[0]

    def _configure(self) -> Any:
        global _call
        call = self._enter(None)
        try:
            kinds = nriwasm.WitWorld().configure(self.settings)
            undeclared = _beyond_declaration(kinds)
            if undeclared is not None:
                return undeclared, call.logs
            return kinds, call.logs
        except Err as e:
            return str(e.value), call.logs
        finally:
            _call = None

    def run(self, event: TestEvent) -> "Outcome":
        """Runs ``event`` through the policy (the one its module created, as
        the component does) as the host would. Raises if ``configure``
        refuses the settings: the host would not have loaded the policy."""
        global _call
        configured, logs = self._configure()
        if isinstance(configured, str):
            raise AssertionError(f"configure rejected the settings {self.settings!r}: {configured} "
                                 "(the host would not load the policy)")
        kind = event.kind
        if kind not in configured:
            return Outcome(kind, False, nriwasm.none(), None, None, logs, self.state)
        call = self._enter(copy.deepcopy(event.event))
        reply = denial = failure = None
        try:
            reply = nriwasm.WitWorld().handle(kind)
        except Err as e:
            denial = str(e.value)
        except nriwasm.PolicyFailure as e:
            failure = str(e)
        finally:
            _call = None
        if reply is not None:
            self.state = call.state
        return Outcome(kind, True, reply, denial, failure, logs + call.logs, self.state)


class Outcome:
    """What a call answered, logged and left in the state."""

    def __init__(self, kind: types.EventKind, called: bool, reply: Any, denied: Optional[str],
                 failure: Optional[str], logs: List[Any], state: Dict[str, str]) -> None:
        self.kind = kind
        #: Whether the handler was called (the policy subscribed to the kind).
        self.called = called
        self._reply = reply
        #: The reason of a denial, or None.
        self.denied = denied
        #: The traceback of a failure (an exception other than a denial: a bug), or None.
        self.failure = failure
        #: (level, message) lines logged by configure and the handler, in order.
        self.logs = logs
        #: The committed state after the call.
        self.state = dict(state)

    def reply(self) -> types.Reply:
        """The reply. Raises if the event was denied or the handler failed."""
        if self.failure is not None:
            raise AssertionError(f"the {self.kind.name} handler failed:\n{self.failure}")
        if self.denied is not None:
            raise AssertionError(f"the policy denied {self.kind.name}: {self.denied}")
        return self._reply

    def denial(self) -> str:
        """The reason of the denial. Raises if the policy did not deny."""
        if self.failure is not None:
            raise AssertionError(f"the {self.kind.name} handler failed (it did not deny):\n{self.failure}")
        if self.denied is None:
            raise AssertionError(f"the policy did not deny {self.kind.name}; it replied {describe(self._reply)}")
        return self.denied

    def lines(self) -> List[str]:
        """The reply as the lines ``nri-wasm eval`` prints, sorted."""
        return describe(self.reply())

    def logged(self, text: str) -> bool:
        """Whether some logged line contains ``text``."""
        return any(text in m for _, m in self.logs)


# ---- replies as lines --------------------------------------------------------------
# The format of `nri-wasm eval` and the Rust SDK's `testing::describe`: one
# line per thing a reply sets, sorted; lists of strings in Rust's debug
# form (["a", "b"]), absent values `-`, enums their NRI numbers.


def _q(items: Optional[List[Any]]) -> str:
    return "[" + ", ".join(json.dumps(str(s)) for s in items or []) + "]"


def _opt(v: Any) -> str:
    if v is None:
        return "-"
    return str(v).lower() if isinstance(v, bool) else str(v)


def _b(v: bool) -> str:
    return "true" if v else "false"


_HOOK_STAGES = [("prestart", "prestart"), ("create_runtime", "createRuntime"), ("create_container", "createContainer"),
                ("start_container", "startContainer"), ("poststart", "poststart"), ("poststop", "poststop")]


def describe(reply: types.Reply) -> List[str]:
    """A reply (the world's record) as sorted lines."""
    out: List[str] = []
    if reply.adjust is not None:
        _adjustment(reply.adjust, out)
    for u in reply.update:
        out.append(f"update {u.container_id} ignore_failure={_b(u.ignore_failure)}")
        if u.resources is not None:
            _resources_lines(f"update {u.container_id} resources", u.resources, out)
    for e in reply.evict:
        out.append(f"evict {e.container_id} reason={e.reason}")
    return sorted(out, key=lambda s: s.encode())


def _adjustment(a: types.ContainerAdjustment, out: List[str]) -> None:
    out.extend(f"annotation {kv.key}={kv.value}" for kv in a.annotations)
    out.extend(f"mount {m.destination} type={m.type} source={m.source} options={_q(m.options)}" for m in a.mounts)
    out.extend(f"env {kv.key}={kv.value}" for kv in a.env)
    if a.hooks is not None:
        for field, stage in _HOOK_STAGES:
            for i, h in enumerate(getattr(a.hooks, field)):
                out.append(f"hook {stage}[{i}] {h.path} args={_q(h.args)} env={_q(h.env)} timeout={_opt(h.timeout)}")
    out.extend(f"rlimit {r.type} soft={r.soft} hard={r.hard}" for r in a.rlimits)
    out.extend(f"cdi {d}" for d in a.cdi_devices)
    if a.args:
        out.append(f"args {_q(a.args)}")
    if a.linux is not None:
        _linux(a.linux, out)


def _linux(l: types.LinuxContainerAdjustment, out: List[str]) -> None:  # noqa: E741
    for d in l.devices:
        mode = "-" if d.file_mode is None else format(d.file_mode, "o")
        out.append(f"device {d.path} type={d.type} major={d.major} minor={d.minor} mode={mode} "
                   f"uid={_opt(d.uid)} gid={_opt(d.gid)}")
    if l.resources is not None:
        _resources_lines("resources", l.resources, out)
    if l.cgroups_path:
        out.append(f"cgroups_path={l.cgroups_path}")
    if l.oom_score_adj is not None:
        out.append(f"oom_score_adj={l.oom_score_adj}")
    if l.io_priority is not None:
        out.append(f"io_priority class={l.io_priority.class_.value} priority={l.io_priority.priority}")
    s = l.seccomp_policy
    if s is not None:
        out.append(f"seccomp default_action={s.default_action} default_errno={_opt(s.default_errno)} "
                   f"architectures={_q(s.architectures)} flags={_q(s.flags)} listener_path={s.listener_path} "
                   f"listener_metadata={s.listener_metadata}")
        for i, c in enumerate(s.syscalls):
            args = [f"{a.index}:{a.value}:{a.value_two}:{a.op}" for a in c.args]
            out.append(f"seccomp.syscalls[{i}] names={_q(c.names)} action={c.action} errno={_opt(c.errno_ret)} "
                       f"args={_q(args)}")
    out.extend(f"namespace {n.type} path={n.path}" for n in l.namespaces)
    out.extend(f"sysctl {kv.key}={kv.value}" for kv in l.sysctl)
    out.extend(f"net_device {d.host_name}={d.name}" for d in l.net_devices)
    if l.scheduler is not None:
        sc = l.scheduler
        flags = ", ".join(str(f.value) for f in sc.flags)
        out.append(f"scheduler policy={sc.policy.value} nice={sc.nice} priority={sc.priority} flags=[{flags}] "
                   f"runtime={sc.runtime} deadline={sc.deadline} period={sc.period}")
    if l.rdt is not None:
        r = l.rdt
        schemata = "-" if r.schemata is None else _q(r.schemata)
        out.append(f"rdt clos_id={_opt(r.clos_id)} schemata={schemata} monitoring={_opt(r.enable_monitoring)} "
                   f"remove={_b(r.remove)}")
    if l.memory_policy is not None:
        m = l.memory_policy
        flags = ", ".join(str(f.value) for f in m.flags)
        out.append(f"memory_policy mode={m.mode.value} nodes={m.nodes} flags=[{flags}]")


def _resources_lines(prefix: str, r: types.LinuxResources, out: List[str]) -> None:
    if r.memory is not None:
        for name in ("limit", "reservation", "swap", "kernel", "kernel_tcp", "swappiness", "disable_oom_killer",
                     "use_hierarchy"):
            v = getattr(r.memory, name)
            if v is not None:
                out.append(f"{prefix}.memory.{name}={_opt(v)}")
    if r.cpu is not None:
        for name in ("shares", "period", "realtime_period", "quota", "realtime_runtime"):
            v = getattr(r.cpu, name)
            if v is not None:
                out.append(f"{prefix}.cpu.{name}={v}")
        for name in ("cpus", "mems"):
            if getattr(r.cpu, name):
                out.append(f"{prefix}.cpu.{name}={getattr(r.cpu, name)}")
    out.extend(f"{prefix}.hugepage {h.page_size}={h.limit}" for h in r.hugepage_limits)
    if r.blockio_class is not None:
        out.append(f"{prefix}.blockio_class={r.blockio_class}")
    if r.rdt_class is not None:
        out.append(f"{prefix}.rdt_class={r.rdt_class}")
    out.extend(f"{prefix}.unified {kv.key}={kv.value}" for kv in r.unified)
    for i, d in enumerate(r.devices):
        out.append(f"{prefix}.devices[{i}] allow={_b(d.allow)} type={d.type} major={_opt(d.major)} "
                   f"minor={_opt(d.minor)} access={d.access}")
    if r.pids is not None:
        out.append(f"{prefix}.pids.limit={r.pids.limit}")
