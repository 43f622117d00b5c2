"""Environments: the protocol, specs, and (in a later release) pools and providers."""

from agentfly_cli.envs.base import BaseEnv, Env, EnvSpec, standalone_env

__all__ = ["BaseEnv", "Env", "EnvSpec", "standalone_env"]
