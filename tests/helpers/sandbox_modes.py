"""Which sandbox a test that is not about isolation runs the ``python`` env in.

The env fails closed: without a working bubblewrap it does not start. Tests of other things
(recipes, rollouts, pools) opt in to ``sandbox: none`` explicitly where bubblewrap cannot
sandbox, so the suite runs anywhere; tests of the isolation itself skip there instead.
"""

from __future__ import annotations

import pytest

from envs_builtin.python_sandbox import bwrap_problem

BWRAP_PROBLEM = bwrap_problem()
NEEDS_BWRAP = pytest.mark.skipif(
    BWRAP_PROBLEM is not None, reason=f"bubblewrap cannot sandbox here: {BWRAP_PROBLEM}"
)
#: bubblewrap where it works, else the explicit opt-in to running code unsandboxed
SANDBOX = "bwrap" if BWRAP_PROBLEM is None else "none"
#: the same, as ``agentfly rollout``/``train`` flags
SANDBOX_FLAGS = ("--set", f"envs.python.options.sandbox={SANDBOX}")
