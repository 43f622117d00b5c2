"""Sources of training steps: the asynchronous producer of rollouts and its steps (the synchronous
loop is the trainer's).
"""
