"""``verifiers_rubric``: the verifiers rubric's result, which the bridge's agent returns as its
answer (a JSON object: ``reward`` and the rubric's named ``metrics``), as the episode's reward
with each metric in ``reward_extras``."""

from __future__ import annotations

import json
import math
from typing import Any

from agentfly_cli.components.rewards import reward


@reward
def verifiers_rubric(prediction: Any) -> dict:
    """The rubric's reward, and its named metrics as extras (``metric/NAME``)."""
    result = json.loads(prediction) if isinstance(prediction, str) else prediction
    if not isinstance(result, dict) or "reward" not in result:
        raise ValueError(f"not a verifiers rubric result: {str(prediction)[:80]!r}")
    extras = {
        f"metric/{name}": float(value)
        for name, value in (result.get("metrics") or {}).items()
        if isinstance(value, (int, float)) and math.isfinite(value)
    }
    return {"reward": float(result["reward"]), **extras}
