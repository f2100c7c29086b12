"""Inspect's entry point (``[project.entry-points.inspect_ai] denv = "denv._registry"``).

Inspect loads every ``inspect_ai`` entry point the first time a sandbox name is not found, so this
module registers ``denv`` and nothing else. The decorator accepts a function returning the class;
Inspect calls it at once, so the adapter (and its client) load when this module does.
"""

from inspect_ai.util import sandboxenv


@sandboxenv(name="denv")
def denv():  # noqa: ANN201 - Inspect's registry decorates a zero-argument factory
    from .inspect import DenvSandboxEnvironment

    return DenvSandboxEnvironment
