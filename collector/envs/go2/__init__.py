"""Unitree Go2 tasks: the MJCF built from the robot's facts (model) and the joystick task (task)."""
