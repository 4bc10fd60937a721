"""GPU-node side: ring, staging, V-trace, the APPO update, weight publishing, checkpoints, metrics."""

# Every learner module needs torch, which the base install leaves out (collectors run without
# it, and the collector image has none): say which extra brings it, before any module fails
# on its own `import torch`.
try:
    import torch  # noqa: F401
except ModuleNotFoundError as exc:
    if exc.name != "torch":
        raise
    raise ModuleNotFoundError(
        "appo's learner (appo-learner, appo-train) needs torch, which this installation does not have: "
        "pip install 'appo[learner]' (the collector-only install and the appo-collector image leave it out)",
        name="torch",
    ) from None
