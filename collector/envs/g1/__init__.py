"""Unitree G1 humanoid: the MJCF built from the robot's facts (model)."""
