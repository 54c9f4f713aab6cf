"""Square-ish matrix product (M, K) @ (K, N) with M, N, K about 4096.

Family: matmul
"""
import torch
import torch.nn as nn

M = 4093
K = 4096
N = 4099

SMALL_SHAPES = {"M": 37, "K": 45, "N": 29}


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
