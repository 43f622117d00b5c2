"""The humaneval bridge (being built: registers nothing yet)."""
