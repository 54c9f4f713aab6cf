"""RMS norm over the hidden axis of a (batch, seq, hidden) tensor, with a learned scale.

Family: norm
"""
import torch
import torch.nn as nn

batch_size = 32
seq_len = 2048
hidden = 4095

SMALL_SHAPES = {"batch_size": 2, "seq_len": 3, "hidden": 37}


class Model(nn.Module):
    """y = x / sqrt(mean(x^2 over the last axis) + eps) * weight."""

    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden]
