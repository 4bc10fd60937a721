"""GPU-node side: ring, staging, V-trace, the APPO update, weight publishing, checkpoints, metrics."""
