"""Envs: the ``Env`` contract and specs; pools (``pool``, ``manager``), providers, and the
pool server's client (``remote``)."""

from agentfly_cli.envs.base import BaseEnv, Env, EnvSpec, standalone_env

__all__ = ["BaseEnv", "Env", "EnvSpec", "standalone_env"]
