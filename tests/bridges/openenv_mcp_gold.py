"""Gold answers for the openenv MCP test server's episodes (``--set openenv.gold=...``): the
right ``guess`` call in the Hermes format the recipe's parser reads."""

import json


def tool_call(name: str, **arguments) -> str:
    """One call as the model writes it (chatml-tools teaches it, the hermes parser reads it)."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def right_call(row: dict) -> list[str]:
    return [tool_call("guess", number=row["seed"] % 8 + 1)]
