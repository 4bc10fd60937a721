"""The policy's building blocks in float32 NumPy: observation normaliser and MLP, writing into reused buffers.

They compute what common/policy.py's EmpiricalNormalizer.forward and `mlp`
compute in float32, for a collector without torch.  Every op writes into
buffers sized for the largest batch seen so far, and a call returns views of
them, so steady-state inference allocates nothing; a result holds until the
next call on the same object.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from common.weight_layout import NORMALIZER_CLIP, NORMALIZER_EPS

# torch.nn's constants for the activations common/policy.py builds with their defaults.
_ELU_ALPHA = np.float32(1.0)
_SELU_ALPHA = np.float32(1.6732632423543772848170429916717)
_SELU_SCALE = np.float32(1.0507009873554804934193349852946)
_LEAKY_SLOPE = np.float32(0.01)


def _relu(x: np.ndarray, _scratch: np.ndarray) -> None:
    np.maximum(x, 0, out=x)


def _tanh(x: np.ndarray, _scratch: np.ndarray) -> None:
    np.tanh(x, out=x)


def _elu_scaled(x: np.ndarray, scratch: np.ndarray, alpha: np.float32) -> None:
    # max(x, 0) + alpha * (exp(min(x, 0)) - 1): the negative part from a clipped copy, so exp never overflows.
    np.minimum(x, 0, out=scratch)
    np.expm1(scratch, out=scratch)
    scratch *= alpha
    np.maximum(x, 0, out=x)
    x += scratch


def _elu(x: np.ndarray, scratch: np.ndarray) -> None:
    _elu_scaled(x, scratch, _ELU_ALPHA)


def _selu(x: np.ndarray, scratch: np.ndarray) -> None:
    _elu_scaled(x, scratch, _SELU_ALPHA)
    x *= _SELU_SCALE


def _leaky_relu(x: np.ndarray, scratch: np.ndarray) -> None:
    # max(x, slope * x) is leaky ReLU for a slope below 1.
    np.multiply(x, _LEAKY_SLOPE, out=scratch)
    np.maximum(x, scratch, out=x)


# In-place activation of x, with a scratch array of x's shape; one per algo.policy.activation value.
ACTIVATIONS: dict[str, Callable[[np.ndarray, np.ndarray], None]] = {
    "elu": _elu, "relu": _relu, "tanh": _tanh, "selu": _selu, "leaky_relu": _leaky_relu,
}


class NumpyNormalizer:
    """EmpiricalNormalizer.forward as angle encoding, a shift, a scale and a clip; only the encoding when off."""

    def __init__(self, enabled: bool, angles: tuple[int, ...] = ()):
        self.enabled = enabled
        self.angles = list(angles)
        self.shift = self.scale = None
        self._out = np.empty((0, 0), np.float32)

    def load(self, mean: np.ndarray, var: np.ndarray) -> None:
        """Take new statistics (copied: they may be views of a weight vector that gets reused)."""
        self.shift = np.array(mean, np.float32)
        self.scale = (1.0 / np.sqrt(var + np.float32(NORMALIZER_EPS))).astype(np.float32)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Normalised observations [n, dim (+ angles)] (a view of this normaliser's buffer, or x itself when
        there is nothing to do)."""
        if not self.enabled and not self.angles:
            return x
        n, dim = x.shape
        width = dim + len(self.angles)
        if n > self._out.shape[0] or self._out.shape[1] != width:
            self._out = np.empty((n, width), np.float32)
        out = self._out[:n]
        if self.angles:  # common/policy.py encode_angles: sines in place, cosines appended
            out[:, :dim] = x
            angles = x[:, self.angles]
            out[:, self.angles] = np.sin(angles)
            out[:, dim:] = np.cos(angles)
            x = out
        if not self.enabled:
            return out
        np.subtract(x, self.shift, out=out)
        out *= self.scale
        np.clip(out, -NORMALIZER_CLIP, NORMALIZER_CLIP, out=out)
        return out


class NumpyMLP:
    """An MLP's forward pass: linear layers with `activation` between them, none after the last, float32."""

    def __init__(self, activation: str):
        self._activate = ACTIVATIONS[activation]
        self.layers: list[tuple[np.ndarray, np.ndarray]] = []  # (weight^T [in, out], bias [out]) per layer
        self._rows = 0
        self._outs: list[np.ndarray] = []
        self._scratch: list[np.ndarray] = []

    def load(self, layers: list[tuple[np.ndarray, np.ndarray]]) -> None:
        """Take (weight [out, in], bias [out]) per linear layer, input first (torch's nn.Linear layout).

        The weights are stored transposed and contiguous, so each layer is one matmul
        [n, in] @ [in, out] straight into its output buffer.
        """
        if [w.shape[0] for w, _ in layers] != [w_t.shape[1] for w_t, _ in self.layers]:
            self._rows = 0  # other widths (the first load): buffers are made at the next call
        # np.array copies always; ascontiguousarray would keep a view of a [1, in] layer (its transpose is contiguous).
        self.layers = [(np.array(w.T, np.float32, order="C"), np.array(b, np.float32)) for w, b in layers]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Outputs [n, out] of inputs [n, in] (a view of this MLP's buffer)."""
        n = x.shape[0]
        if n > self._rows:
            self._allocate(n)
        last = len(self.layers) - 1
        for i, (weight_t, bias) in enumerate(self.layers):
            h = self._outs[i][:n]
            np.matmul(x, weight_t, out=h)
            h += bias
            if i < last:
                self._activate(h, self._scratch[i][:n])
            x = h
        return x

    def _allocate(self, rows: int) -> None:
        widths = [weight_t.shape[1] for weight_t, _ in self.layers]
        self._outs = [np.empty((rows, w), np.float32) for w in widths]
        self._scratch = [np.empty((rows, w), np.float32) for w in widths[:-1]]
        self._rows = rows
