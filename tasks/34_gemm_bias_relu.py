"""Linear layer followed by ReLU: y = relu(x @ W^T + b).

Family: gemm_epilogue
"""
import torch
import torch.nn as nn

batch_size = 8192
in_features = 2048
out_features = 4093

SMALL_SHAPES = {"batch_size": 37, "in_features": 45, "out_features": 29}


class Model(nn.Module):
    """x: (batch, in_features); W: (out_features, in_features); b: (out_features,)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
