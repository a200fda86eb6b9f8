"""The benchmarks: throughput and cost per message of the runtime against the bare drivers.

Run ``python bench/run.py --help``. Benchmarks are not tests: nothing here asserts a time.
"""
