"""Tool-call formats: one module per family (JSON, XML, pythonic, text, harmony, DeepSeek), and the
scanners they share.
"""
