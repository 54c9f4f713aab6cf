"""Matrix product with a long reduction and a narrow output: (M, K) @ (K, N) with K >> N.

Family: matmul
"""
import torch
import torch.nn as nn

M = 8192
K = 65521
N = 64

SMALL_SHAPES = {"M": 37, "K": 300, "N": 5}


class Model(nn.Module):
    """C = A @ B; output shape (M, N)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
