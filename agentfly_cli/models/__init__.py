"""Models that agentfly builds or converts locally: no hub downloads, ever."""

from agentfly_cli.models.resolve import cache_dir, known_models, resolve_model

__all__ = ["cache_dir", "known_models", "resolve_model"]
