"""Layer norm over the hidden axis of a (batch, seq, hidden) tensor, with learned scale and shift.

Family: norm
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16
seq_len = 2047
hidden = 8191

SMALL_SHAPES = {"batch_size": 2, "seq_len": 3, "hidden": 300}


class Model(nn.Module):
    """y = (x - mean) / sqrt(var + eps) * weight + bias; biased variance over the last axis."""

    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden))
        self.bias = nn.Parameter(torch.randn(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden]
