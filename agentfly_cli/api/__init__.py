"""The typed public API, what the CLI itself runs: settings (:mod:`.settings`), rollouts and
evaluations (:mod:`.rollouts`), training (:mod:`.training`), an :class:`~.experiment.Experiment`
that binds a run's components once, and the results (:mod:`.results`). See docs/python.md."""
