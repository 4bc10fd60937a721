"""Measurements: appo-bench and its parts (physics, update, ingest), and the soak run."""
