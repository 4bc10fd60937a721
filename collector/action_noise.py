"""Temporally correlated exploration noise: the policy's standard-normal draws, coloured over time per env.

A Gaussian policy acts as mu + std * z.  Usually z is drawn afresh every step
(white noise: at 50 Hz a leg only jitters).  With algo.policy.action_noise_beta
= beta > 0 each env and action dimension follows its own sequence of z whose
power spectrum falls as 1/f^beta (beta 1: pink noise), so successive draws are
correlated and the exploration moves limbs coherently over many steps
(Eberhard et al., "Pink Noise Is All You Need", ICLR 2023; Hollenstein et al.,
"Colored Noise in PPO", AAAI 2024).  Every draw is still N(0, 1) at each step,
so the actions' log-probs, and everything the learner computes from them, are
those of the same Gaussian policy.

Sequences are made `horizon` steps at a time by shaping white noise in the
frequency domain (Timmer and Koenig 1995, as the `colorednoise` package does),
scaled to unit variance; a row block that used its sequence up gets a fresh one.
"""

from __future__ import annotations

import numpy as np

HORIZON = 256  # steps per generated sequence: 5 s at 50 Hz, well past the correlations that matter


def colored_sequences(beta: float, shape: tuple[int, ...], horizon: int, rng: np.random.Generator) -> np.ndarray:
    """float32 [*shape, horizon]: independent zero-mean, unit-variance Gaussian sequences with PSD ~ 1/f^beta."""
    freqs = np.fft.rfftfreq(horizon)
    scale = np.maximum(freqs, 1.0 / horizon) ** (-beta / 2.0)
    real = rng.standard_normal((*shape, len(freqs))) * scale
    imag = rng.standard_normal((*shape, len(freqs))) * scale
    # The mean's coefficient (and the Nyquist one of an even horizon) of a real signal is real: its imaginary
    # part goes into the real one, so that every coefficient keeps its share of the variance.
    real[..., 0] *= np.sqrt(2.0)
    imag[..., 0] = 0.0
    if horizon % 2 == 0:
        real[..., -1] *= np.sqrt(2.0)
        imag[..., -1] = 0.0
    # Each sample's expected variance, divided out: 2 s_k^2 for the real coefficients, 4 s_k^2 for the others.
    share = np.full(len(freqs), 4.0)
    share[0] = 2.0
    if horizon % 2 == 0:
        share[-1] = 2.0
    sigma = np.sqrt(np.sum(share * scale ** 2)) / horizon
    return (np.fft.irfft(real + 1j * imag, n=horizon, axis=-1) / sigma).astype(np.float32)


class ColoredNoise:
    """Per-env sequences of standard-normal draws; `draw(rows)` gives the next step's [rows, act_dim] of a row block.

    Each block of rows (an env group of the collector) advances on its own, so the groups of a double-buffered
    collector keep their own clocks.
    """

    def __init__(self, num_envs: int, act_dim: int, beta: float, seed: int, horizon: int = HORIZON):
        self.num_envs, self.act_dim, self.beta, self.horizon = num_envs, act_dim, beta, horizon
        self.seed(seed)

    def seed(self, seed: int) -> None:
        """Restart every sequence from `seed` (the collector's deterministic mode reseeds per policy version)."""
        self.rng = np.random.default_rng(seed)
        self._sequences = np.empty((self.num_envs, self.act_dim, self.horizon), np.float32)
        self._step = np.full(self.num_envs, self.horizon)  # used up: the first draw of each block makes its own

    def draw(self, rows: slice) -> np.ndarray:
        """The next draws [n, act_dim] of envs `rows` (every row of a block is at the same step of its sequence)."""
        t = int(self._step[rows.start or 0])
        if t >= self.horizon:
            n = len(range(*rows.indices(self.num_envs)))
            self._sequences[rows] = colored_sequences(self.beta, (n, self.act_dim), self.horizon, self.rng)
            t = 0
        self._step[rows] = t + 1
        return self._sequences[rows, :, t]
