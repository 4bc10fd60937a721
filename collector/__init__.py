"""CPU-node side: batched MuJoCo tasks and the rollout loop that streams to the learner."""
