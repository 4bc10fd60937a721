"""User tools around a trained policy: evaluation, videos, ONNX export, learning-curve plots."""
