"""The task plan of a training run: the task stream, the held-out split, curriculum, balance, held-
out evaluation.
"""
