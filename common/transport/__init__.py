"""Transports between collectors and the learner: the interface, wire format, shared memory, ZeroMQ, CURVE."""
