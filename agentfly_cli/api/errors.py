"""How a front end reports problems: the errors users can cause, the debug switch, safe text.

Light to import (no pydantic, no torch): the CLI's output module uses it for ``--help`` too.
"""

from __future__ import annotations

from agentfly_cli.errors import RewardError, UserError
from agentfly_cli.files.safe_text import printable
from agentfly_cli.settings.variables import debug_enabled

__all__ = ["RewardError", "UserError", "debug_enabled", "printable"]

# UserError: bad input, told in one line naming the problem and the fix (the CLI exits 2).
# RewardError: a reward failed with on_error="raise".
# debug_enabled(): AGENTFLY_DEBUG is on (show tracebacks, not one line).
# printable(text): text with every control character shown escaped, safe to print.
