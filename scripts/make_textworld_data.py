"""Write the packaged TextWorld games and tasks of the ``textworld`` recipe (deterministic).

ALFWorld-style household quests made with TextWorld's ``GameMaker``: a few rooms with furniture
(containers that open and close, supporters), small objects on and in them, and a goal such as
"put the mug in the cabinet". The game gives a point for picking up a goal object and one for
putting it in place (max score 2; hard games have two goals, max score 4), so partial progress
scores. Every game is played through its walkthrough before it is kept: it must end won,
with the full score. A layout whose walkthrough is longer than ``MAX_COMMANDS`` (the recipe's
``rollout.max_turns``) is drawn again from another seed, so every game can be won in one chain.

- ``agentfly_cli/recipes/data/textworld_games.tar.xz``: the compiled games (``tw-NNN.z8`` and
  TextWorld's ``tw-NNN.json``), one solid archive because the games share most of their bytes.
- ``agentfly_cli/recipes/data/textworld.jsonl``: one task per game: ``game``, ``objective``,
  ``question`` (objective and first room, the user message), ``max_score``, ``walkthrough``.

Needs ``textworld`` (``pip install 'agentfly-cli[tasks]'``). About 1 s per game on one core.
Run: python scripts/make_textworld_data.py [--count 240] [--jobs 2]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import re
import sys
import tarfile
import tempfile
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "agentfly_cli" / "recipes" / "data"
ARCHIVE = DATA / "textworld_games.tar.xz"
TASKS = DATA / "textworld.jsonl"
SEED = 4242
RECIPE = ROOT / "agentfly_cli" / "recipes" / "textworld.yaml"
# The recipe's rollout.max_turns: the most commands a walkthrough may take (one chain wins it).
MAX_COMMANDS = yaml.safe_load(RECIPE.read_text(encoding="utf-8"))["rollout"]["max_turns"]

# Room kinds and their furniture: (name, "c" container | "s" supporter).
ROOMS = {
    "kitchen": [
        ("fridge", "c"),
        ("kitchen cabinet", "c"),
        ("countertop", "s"),
        ("dining table", "s"),
    ],
    "living room": [("sofa", "s"), ("coffee table", "s"), ("shelf", "s"), ("drawer", "c")],
    "bedroom": [("bed", "s"), ("nightstand", "s"), ("wardrobe", "c"), ("dresser", "c")],
    "bathroom": [("sink", "s"), ("towel rack", "s"), ("bathroom cabinet", "c")],
    "office": [("desk", "s"), ("bookshelf", "s"), ("filing cabinet", "c"), ("box", "c")],
}
OBJECTS = [
    "apple", "mug", "book", "towel", "soap bar", "remote control", "pen", "plate", "spoon",
    "candle", "newspaper", "pillow", "cup", "bowl", "laptop", "cellphone", "alarm clock",
    "tomato", "bread", "vase", "watch", "sponge", "cd", "pencil",
]  # fmt: skip
DIRECTIONS = {(0, 1): "north", (0, -1): "south", (1, 0): "east", (-1, 0): "west"}
LEVELS = ("easy", "medium", "hard")  # 1 room | 2-3 rooms | 3-4 rooms and two goals


def plan(index: int, seed: int = SEED) -> dict:
    """The layout of game ``index`` (rooms, furniture, objects, goals; no textworld): the first
    draw whose walkthrough takes at most ``MAX_COMMANDS`` commands."""
    for attempt in range(100):
        layout = draw(index, seed, attempt)
        if len(walkthrough(layout)) <= MAX_COMMANDS:
            return layout
    raise RuntimeError(f"game {index}: no layout in 100 draws fits {MAX_COMMANDS} commands")


def draw(index: int, seed: int, attempt: int) -> dict:
    """One random layout of game ``index`` (attempt 0 keeps the layouts made before the limit)."""
    rng = random.Random(seed * 1000 + index if attempt == 0 else f"{seed}:{index}:{attempt}")
    level = LEVELS[index % 3]
    n_rooms = {"easy": 1, "medium": rng.choice([2, 3]), "hard": rng.choice([3, 4])}[level]
    kinds = rng.sample(sorted(ROOMS), n_rooms)
    cells, links = [(0, 0)], []
    while len(cells) < n_rooms:  # a random tree of rooms on a grid
        parent = rng.randrange(len(cells))
        step = rng.choice(sorted(DIRECTIONS))
        cell = (cells[parent][0] + step[0], cells[parent][1] + step[1])
        if cell not in cells:
            links.append((parent, len(cells), DIRECTIONS[step]))
            cells.append(cell)
    furniture = []  # (name, kind, room, closed)
    for room, kind in enumerate(kinds):
        for name, ftype in rng.sample(ROOMS[kind], rng.choice([2, 3])):
            furniture.append((name, ftype, room, ftype == "c" and rng.random() < 0.7))
    objects = rng.sample(OBJECTS, rng.randint(3, 5))
    where = {obj: rng.randrange(len(furniture)) for obj in objects}
    goals = []
    for obj in objects[: 2 if level == "hard" else 1]:
        source = furniture[where[obj]]
        far = [i for i, f in enumerate(furniture) if f[2] != source[2]]
        near = [i for i, f in enumerate(furniture) if f[2] == source[2] and f != source]
        pool = far if (level != "easy" and far and rng.random() < 0.8) else near or far
        goals.append((obj, rng.choice(pool)))
    return {
        "index": index,
        "level": level,
        "rooms": kinds,
        "links": links,
        "furniture": furniture,
        "where": where,
        "goals": goals,
        "start": rng.randrange(n_rooms),
    }


def _route(layout: dict, src: int, dst: int) -> list[str]:
    """``go DIRECTION`` commands from room ``src`` to room ``dst`` (breadth-first)."""
    back = {"north": "south", "south": "north", "east": "west", "west": "east"}
    edges: dict[int, list[tuple[int, str]]] = {}
    for a, b, direction in layout["links"]:
        edges.setdefault(a, []).append((b, direction))
        edges.setdefault(b, []).append((a, back[direction]))
    previous = {src: None}
    queue = deque([src])
    while queue:
        room = queue.popleft()
        for nxt, direction in edges.get(room, []):
            if nxt not in previous:
                previous[nxt] = (room, direction)
                queue.append(nxt)
    path = []
    while dst != src:
        dst, direction = previous[dst]
        path.append(f"go {direction}")
    return path[::-1]


def walkthrough(layout: dict) -> list[str]:
    """The commands that solve the game, goal by goal."""
    furniture = layout["furniture"]
    room, opened, commands = layout["start"], set(), []
    for obj, target in layout["goals"]:
        for holder, verb in ((layout["where"][obj], "take"), (target, "put")):
            name, ftype, holder_room, closed = furniture[holder]
            commands += _route(layout, room, holder_room)
            room = holder_room
            if closed and name not in opened:
                commands.append(f"open {name}")
                opened.add(name)
            if verb == "take":
                commands.append(f"take {obj} from {name}")
            else:
                commands.append(f"{'insert' if ftype == 'c' else 'put'} {obj} "
                                f"{'into' if ftype == 'c' else 'on'} {name}")  # fmt: skip
    return commands


def max_score(layout: dict) -> int:
    """A point for picking up each goal object and one for putting it in place."""
    return 2 * len(layout["goals"])


def objective(layout: dict) -> str:
    parts = []
    for obj, target in layout["goals"]:
        name, ftype = layout["furniture"][target][:2]
        parts.append(f"the {obj} {'in' if ftype == 'c' else 'on'} the {name}")
    return "Your task is to: put " + " and ".join(parts) + "."


def build_game(layout: dict, path: Path):
    """Compile the game of ``layout`` to ``path`` (``.z8``, with its ``.json`` beside it)."""
    import textworld
    from textworld import GameMaker
    from textworld.generator.game import Event, Quest

    options = textworld.GameOptions()
    options.seeds = SEED + layout["index"]
    maker = GameMaker(options)
    rooms = [maker.new_room(kind) for kind in layout["rooms"]]
    for a, b, direction in layout["links"]:
        back = {"north": "south", "south": "north", "east": "west", "west": "east"}[direction]
        maker.connect(getattr(rooms[a], direction), getattr(rooms[b], back))
    maker.set_player(rooms[layout["start"]])
    holders = []
    for name, ftype, room, closed in layout["furniture"]:
        entity = maker.new(type=ftype, name=name)
        if ftype == "c":
            maker.add_fact("closed" if closed else "open", entity)
        rooms[room].add(entity)
        holders.append(entity)
    things = {}
    for obj, holder in layout["where"].items():
        things[obj] = maker.new(type="o", name=obj)
        holders[holder].add(things[obj])
    for index, room in enumerate(rooms):
        room.infos.desc = room_text(layout, index, [h.id for h in holders])
    maker.quests = []
    for obj, target in layout["goals"]:  # a point for holding the object, one for placing it
        relation = "in" if layout["furniture"][target][1] == "c" else "on"
        for fact in (
            maker.new_fact("in", things[obj], maker.inventory),
            maker.new_fact(relation, things[obj], holders[target]),
        ):
            maker.quests.append(Quest(win_events=[Event(conditions={fact})], reward=1))
    game = maker.build()
    game.objective = objective(layout)
    game.metadata["walkthrough"] = walkthrough(layout)
    options = textworld.GameOptions()
    options.path = str(path)
    options.force_recompile = True
    return textworld.generator.compile_game(game, options)


def room_text(layout: dict, room: int, ids: list[str]) -> str:
    """A short ALFWorld-style room description in Inform 7 text, kept up to date by the game:
    what is here (containers say whether they are open), what lies in and on it, the exits."""
    here = [(name, ftype, ids[i]) for i, (name, ftype, r, _) in enumerate(layout["furniture"])
            if r == room]  # fmt: skip
    items = [f"a {name}" + (f" ([if {eid} is open]open[otherwise]closed[end if])"
             if ftype == "c" else "") for name, ftype, eid in here]  # fmt: skip
    text = f"You are in the {layout['rooms'][room]}. You see " + _join(items) + "."
    for name, ftype, eid in here:
        if ftype == "c":
            text += (f"[if {eid} is open and there is something in the {eid}] In the {name}: "
                     f"[a list of things in the {eid}].[end if]")  # fmt: skip
        else:
            text += (f"[if there is something on the {eid}] On the {name}: "
                     f"[a list of things on the {eid}].[end if]")  # fmt: skip
    back = {"north": "south", "south": "north", "east": "west", "west": "east"}
    exits = [f"{d} to the {layout['rooms'][b]}" for a, b, d in layout["links"] if a == room]
    exits += [f"{back[d]} to the {layout['rooms'][a]}" for a, b, d in layout["links"] if b == room]
    if exits:
        text += " Exits: " + ", ".join(sorted(exits)) + "."
    return text


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def first_observation(text: str) -> str:
    """The reset text without TextWorld's banner and the status line."""
    start = text.find("Your task is to:")
    text = text[start:] if start >= 0 else text
    text = re.sub(r"\n>[^\n]*$", "", text.rstrip())
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def make_one(index: int, folder: str) -> tuple[dict, float]:
    """Build, compile and verify game ``index``; return its task row and build seconds."""
    import textworld

    layout = plan(index)
    started = time.perf_counter()
    path = Path(folder) / f"tw-{index:03d}.z8"
    build_game(layout, path)
    seconds = time.perf_counter() - started
    story = bytearray(path.read_bytes())
    story[0x12:0x18] = b"000000"  # the serial number is the compile date: fix it
    path.write_bytes(bytes(story))
    commands = walkthrough(layout)
    infos = textworld.EnvInfos(max_score=True, won=True, objective=True)
    env = textworld.start(str(path), request_infos=infos)
    try:
        state = env.reset()
        question = first_observation(state.feedback)
        score, done = 0, False
        for command in commands:
            state, score, done = env.step(command)
        if not (done and state["won"] and score == state["max_score"] == max_score(layout)):
            raise RuntimeError(f"game {index}: the walkthrough {commands} does not win")
    finally:
        env.close()
    row = {
        "id": f"tw-{index:03d}",
        "game": path.name,
        "question": question,
        "objective": objective(layout),
        "max_score": max_score(layout),
        "walkthrough": commands,
        "level": layout["level"],
        "rooms": len(layout["rooms"]),
    }
    return row, seconds


def main() -> None:
    if os.environ.get("PYTHONHASHSEED") != "0":  # TextWorld's JSON lists follow set order
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, *sys.argv])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=240)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        with ProcessPoolExecutor(args.jobs) as pool:
            results = list(pool.map(make_one, range(args.count), [folder] * args.count))
        rows = [row for row, _ in results]
        seconds = [s for _, s in results]
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:xz", preset=9) as archive:
            for row in rows:
                for suffix in (".z8", ".json"):
                    name = row["game"].removesuffix(".z8") + suffix
                    info = archive.gettarinfo(str(Path(folder) / name), arcname=name)
                    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                    info.mode = 0o644
                    with open(Path(folder) / name, "rb") as data:
                        archive.addfile(info, data)
        ARCHIVE.write_bytes(buffer.getvalue())
    with open(TASKS, "w") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
    mean = sum(seconds) / len(seconds)
    print(f"wrote {TASKS} ({len(rows)} tasks)", file=sys.stderr)
    print(f"wrote {ARCHIVE} ({ARCHIVE.stat().st_size / 1e6:.2f} MB)", file=sys.stderr)
    print(f"build + compile: {mean:.2f} s per game (mean of {len(seconds)})", file=sys.stderr)


if __name__ == "__main__":
    main()
