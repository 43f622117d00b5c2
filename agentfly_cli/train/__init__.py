"""Training: the RL loop, its losses, checkpoints and telemetry."""
