"""The reasoning_gym bridge (being built: registers nothing yet)."""
