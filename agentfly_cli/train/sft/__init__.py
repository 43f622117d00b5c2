"""Supervised fine-tuning on trajectories, and the warm start before RL."""
