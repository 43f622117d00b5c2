"""Training telemetry: per-step metrics, their sinks (JSONL, TensorBoard, W&B, console), progress
and warnings.
"""
