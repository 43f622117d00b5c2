"""A small OpenEnv server for the openenv bridge's tests, written with openenv-core's own server
framework and run by ``.venv-openenv``'s Python: ``python openenv_server.py PORT SESSIONS``.

Guess the number: the secret is ``seed % 8 + 1``; each guess is told higher or lower; the right
one is reward 1.0 and done, and the fourth wrong one is reward 0.0 and done.
"""

from __future__ import annotations

import sys
import uuid

import uvicorn
from openenv.core.env_server import Environment, create_app
from openenv.core.env_server.types import Action, Observation, State

TRIES = 4


class Guess(Action):
    guess: str


class Said(Observation):
    message: str


class GuessNumber(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=str(uuid.uuid4()), step_count=0)
        self.secret = 1

    def reset(self, seed=None, episode_id=None, **kwargs) -> Said:
        self.secret = (seed or 0) % 8 + 1
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        return Said(message=f"Guess my number from 1 to 8; you have {TRIES} tries.")

    def step(self, action: Guess, timeout_s=None, **kwargs) -> Said:
        self._state.step_count += 1
        text = action.guess.strip()
        if text == "sleep":  # a stuck server, for the timeout test
            import time

            time.sleep(60)
        if text == str(self.secret):
            return Said(message="Right!", reward=1.0, done=True)
        done = self._state.step_count >= TRIES
        hint = "higher" if text.isdigit() and int(text) < self.secret else "lower"
        return Said(message=f"No, {hint}.", reward=0.0, done=done)

    @property
    def state(self) -> State:
        return self._state


if __name__ == "__main__":
    port, sessions = int(sys.argv[1]), int(sys.argv[2])
    app = create_app(GuessNumber, Guess, Said, env_name="guess", max_concurrent_envs=sessions)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
