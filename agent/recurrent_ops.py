"""Recurrent layers kept whole in a traced graph. nn.RNN, nn.LSTM and nn.GRU call torch._VF.rnn_tanh /
rnn_relu / lstm / gru, which PyTorch would decompose into one op per time step while tracing (minutes for a
few hundred steps, and nothing a template could recognise). While `kept()` is active those calls go to
custom ops `kernelwright::lstm` (and gru, rnn_tanh, rnn_relu) with the same arguments, so the graph holds one
node per layer stack, which agent/templates lowers to its recurrent kernel.

    with kept():
        gm = make_fx(forward, tracing_mode="fake")(...)
"""
from __future__ import annotations

import contextlib

import torch
from torch import Tensor

_ORIGINAL = {name: getattr(torch._VF, name) for name in ("lstm", "gru", "rnn_tanh", "rnn_relu")}


def _sequence(x: Tensor, hidden: int, bidirectional: bool) -> Tensor:
    return x.new_empty(x.shape[:-1] + ((2 if bidirectional else 1) * hidden,))


@torch.library.custom_op("kernelwright::lstm", mutates_args=())
def lstm(x: Tensor, hx: list[Tensor], params: list[Tensor], has_biases: bool, num_layers: int, dropout: float,
         train: bool, bidirectional: bool, batch_first: bool) -> tuple[Tensor, Tensor, Tensor]:
    out = _ORIGINAL["lstm"](x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
    return tuple(o.clone() for o in out)


@lstm.register_fake
def _(x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    return _sequence(x, hx[0].shape[-1], bidirectional), hx[0].new_empty(hx[0].shape), hx[1].new_empty(hx[1].shape)


def _single_state(name: str):
    @torch.library.custom_op(f"kernelwright::{name}", mutates_args=())
    def op(x: Tensor, hx: Tensor, params: list[Tensor], has_biases: bool, num_layers: int, dropout: float,
           train: bool, bidirectional: bool, batch_first: bool) -> tuple[Tensor, Tensor]:
        out = _ORIGINAL[name](x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
        return tuple(o.clone() for o in out)

    @op.register_fake
    def _(x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        return _sequence(x, hx.shape[-1], bidirectional), hx.new_empty(hx.shape)

    return op


OPS = {"lstm": lstm, "gru": _single_state("gru"), "rnn_tanh": _single_state("rnn_tanh"),
       "rnn_relu": _single_state("rnn_relu")}


@contextlib.contextmanager
def kept():
    """Recurrent layers called inside this block run as the single custom ops above."""
    for name, op in OPS.items():
        setattr(torch._VF, name, op)
    try:
        yield
    finally:
        for name, original in _ORIGINAL.items():
            setattr(torch._VF, name, original)
