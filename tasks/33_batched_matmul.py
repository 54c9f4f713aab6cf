"""Batched matrix product: (batch, M, K) @ (batch, K, N).

Family: matmul
"""
import torch
import torch.nn as nn

batch_size = 128
M = 512
K = 1021
N = 768

SMALL_SHAPES = {"batch_size": 3, "M": 19, "K": 37, "N": 11}


class Model(nn.Module):
    """C[b] = A[b] @ B[b]; output shape (batch, M, N)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B)


def get_inputs():
    return [torch.randn(batch_size, M, K), torch.randn(batch_size, K, N)]


def get_init_inputs():
    return []
