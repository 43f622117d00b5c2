"""Trajectories as training tensors: batches, token logprobs, a shared prompt's KV, direct
gradients.
"""
