"""What tests share: engines, queues, helpers, the reference model and the process scripts.

Tests import from here, never from each other (CONTRIBUTING.md, "Tests in layers").
"""
