"""The typed public API: settings, rollouts, evals and training from a script or a notebook."""
