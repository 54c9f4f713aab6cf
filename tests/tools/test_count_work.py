"""The work a floor is made of (tools/profile.py: count_work): recurrent layers' GEMMs are counted, where
PyTorch's FLOP counter has no formula for them (level 3's LSTMs and GRUs sat at 25,000-37,000x "their floor")."""
import torch

from tools.profile import count_work, rnn_flops


def _gemms(steps: int, gates: int, layers: list[tuple[int, int]], directions: int = 1) -> int:
    """2 * steps * (gates * hidden) * (inputs + hidden), per layer and direction."""
    return directions * sum(2 * steps * gates * h * (i + h) for i, h in layers)


def test_an_lstm_counts_its_gemms_over_every_step():
    model, x = torch.nn.LSTM(32, 64, num_layers=2), torch.randn(10, 3, 32)
    flops, nbytes = count_work(model, [x])
    assert flops == _gemms(30, 4, [(32, 64), (64, 64)])
    assert nbytes >= x.numel() * 4 + sum(p.numel() * 4 for p in model.parameters())


def test_a_bidirectional_gru_and_an_rnn_count_both_directions():
    gru, x = torch.nn.GRU(16, 24, batch_first=True, bidirectional=True), torch.randn(5, 7, 16)
    assert count_work(gru, [x])[0] == _gemms(35, 3, [(16, 24)], directions=2)
    rnn = torch.nn.RNN(16, 8, num_layers=2, nonlinearity="relu")
    assert count_work(rnn, [x])[0] == _gemms(35, 1, [(16, 8), (8, 8)])


def test_cudnns_rnn_op_reads_its_weight_list():
    """aten._cudnn_rnn (what a GPU runs) gets its shapes as the counter passes them: the input, the weight
    list, the flat weight buffer and the states (only the list's 2-D weights count)."""
    weights = [torch.Size([256, 32]), torch.Size([256, 64]), torch.Size([256]), torch.Size([256])]
    flops = rnn_flops(torch.Size([10, 3, 32]), weights, 4, torch.Size([49152]), torch.Size([1, 3, 64]),
                      torch.Size([1, 3, 64]), 2, 64, 0, 1, False, 0.0, False, False, [], None)
    assert flops == _gemms(30, 4, [(32, 64)])


def test_the_fp32_floor_takes_three_tf32_products_where_they_outrun_the_fma_units():
    """An fp32 GEMM's floor is at the faster of cuBLAS's fp32 rate and a third of TF32's (split operands,
    agent/templates/split_operands.py); bf16 and TF32 keep their own rates, and bytes still bound it."""
    from tools.profile import floor_ms

    rates = {"matmul_fp32_flops": 51e12, "matmul_tf32_flops": 360e12, "matmul_half_flops": 700e12,
             "copy_bytes_per_s": 4.27e12}
    assert floor_ms(120e12, 0, rates, "matmul_fp32_flops") == 1e3  # 120 TFLOP at 120 TFLOP/s
    assert floor_ms(51e12, 0, {**rates, "matmul_tf32_flops": 90e12}, "matmul_fp32_flops") == 1e3  # FMA faster
    assert floor_ms(360e12, 0, rates, "matmul_tf32_flops") == 1e3
    assert floor_ms(700e12, 0, rates, "matmul_half_flops") == 1e3
    assert floor_ms(1e12, 4.27e12, rates, "matmul_fp32_flops") == 1e3  # the bytes take longer


def test_the_meta_device_counts_the_same_work_without_memory():
    """A task counted on the meta device (benchmarks/kernelbench_bench.py floors a merged table's rows so) gives
    its CPU count: every distinct storage's bytes, a view of one counted once, though no meta tensor has an
    address."""
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(24, 16)

        def forward(self, x, y):
            return self.linear(x) + y, y.view(-1)

    def build():
        torch.manual_seed(0)
        return Model(), [torch.randn(8, 24), torch.randn(8, 16)]

    model, inputs = build()
    cpu = count_work(model, inputs)
    assert cpu == (2 * 8 * 24 * 16, 4 * (8 * 24 + 24 * 16 + 16 + 8 * 16 + 8 * 16))  # y's view is y
    with torch.device("meta"):
        model, inputs = build()
        assert count_work(model, inputs) == cpu
