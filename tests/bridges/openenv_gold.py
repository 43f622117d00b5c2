"""Gold answers for the openenv test server's episodes (``--set openenv.gold=...``): the
right guess, and a wrong one for all but one secret (a gold that ``recipes check`` flags)."""


def right_guess(row: dict) -> list[str]:
    return [f"ACT: {row['seed'] % 8 + 1}"]


def always_one(row: dict) -> list[str]:
    return ["ACT: 1"]
