"""Shared by every APPO process: config, task and rollout specs, wire format, transports, policy, logging."""
