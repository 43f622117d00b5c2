"""Sources of training steps: the synchronous loop (:mod:`.sync`: each step rolls out its own
tasks) and the asynchronous one (:mod:`.async_steps`: steps take the groups a producer rolled out
earlier). Both hand a step's rollouts (:class:`.step_io.StepRollouts`) to ``Trainer.train_on``.
"""
