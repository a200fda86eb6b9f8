"""Model-based verification: the outcome table in plain Python (outcome_model.py), the
Hypothesis profiles the model tests run under (profiles.py), and the drain script the
concurrency test runs in separate OS processes (drain_worker.py)."""
