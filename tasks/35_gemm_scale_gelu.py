"""Linear layer, scaled, then GELU: y = gelu((x @ W^T + b) * scale).

Family: gemm_epilogue
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4093
in_features = 3072
out_features = 4096
scale = 2.0

SMALL_SHAPES = {"batch_size": 37, "in_features": 45, "out_features": 29}


class Model(nn.Module):
    """x: (batch, in_features); W: (out_features, in_features); b: (out_features,); exact (erf) GELU."""

    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x) * self.scale)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
