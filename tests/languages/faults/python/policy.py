"""Fails on purpose, as the settings text says (see ../README.md)."""
import os

from nriwasm import Deny, Event, Policy, none, settings

policy = Policy()


def down(n: int) -> int:
    return down(n + 1) + 1


@policy.on("create-container")
def create(e: Event):
    mode = settings()
    if mode == "exception":
        raise RuntimeError("fault injected: exception")
    if mode == "panic":
        return None.field  # type: ignore[attr-defined]
    if mode == "trap":
        os.abort()
    if mode == "recursion":
        down(0)
    if mode == "loop":
        while True:
            pass
    if mode == "deny":
        raise Deny("fault injected: denial")
    return none()
