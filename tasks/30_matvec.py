"""Matrix-vector product of an (M, K) matrix with a (K, 1) column vector.

Family: matvec
"""
import torch
import torch.nn as nn

M = 32771
K = 16384

SMALL_SHAPES = {"M": 37, "K": 300}


class Model(nn.Module):
    """y = A @ x; output shape (M, 1). Memory bound: every element of A is read once."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, x)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, 1)]


def get_init_inputs():
    return []
