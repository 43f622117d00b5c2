"""Settings kept as aliases of their replacements: one warning line when a config uses one."""

from __future__ import annotations

import logging

log = logging.getLogger("agentfly_cli.settings")


def deprecated(old: str, new: str, how: str = "") -> None:
    """The one-line warning of a deprecated setting ``old``, naming its replacement ``new``."""
    log.warning("%s is deprecated; use %s%s", old, new, f" ({how})" if how else "")
