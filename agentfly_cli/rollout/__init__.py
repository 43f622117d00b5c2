"""The rollout engine: many multi-turn agent chains at once, recorded token-exactly."""
