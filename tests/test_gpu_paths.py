"""The stacked engine's GPU-only paths, proved on a CPU: its attention backend under vmap, its parameters listed
once, its CUDA-graph capture (against a stand-in for torch.cuda: failed, short-batch and replayed captures), the
members' augmentation in one batched pass, and the members' Adam."""

import contextlib
import copy

import pytest
import torch
import torch.nn.functional as F

from vitbn_nb.data import augment
from vitbn_nb.data.sets import ImageSet
from vitbn_nb.engines import stack
from vitbn_nb.models import build_model

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def members(name="ViTBNFFN", n=3, **kwargs):
    built = []
    for seed in range(n):
        torch.manual_seed(seed)
        model = build_model(name, **({"depth": 1} if name.startswith("ViT") else {}), **kwargs)
        built.append(stack.Member(model, stack.optimizer_for(model, 1e-3 * (seed + 1), CPU), seed))
    return built


def batches(sizes, n=3, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [
        (torch.rand(n, b, 1, 28, 28, generator=generator), torch.randint(0, 10, (n, b), generator=generator))
        for b in sizes
    ]


# -- a stand-in for torch.cuda ------------------------------------------------------------------------------
class FakeStream:
    def __init__(self, name):
        self.name = name

    def wait_stream(self, other):
        pass

    def __repr__(self):
        return f"FakeStream({self.name})"


class FakeCuda:
    """Streams, graphs and the allocator's pool routing as torch.cuda has them, on the CPU. A capture runs its body
    for real (a CPU cannot record one), so the replay right after it is that step already done; later replays run the
    captured step again on the static inputs, as a real replay does. ``fail`` makes the capture's exit raise before it
    restores the stream, as ``torch.cuda.graph.__exit__`` does when ending the capture fails."""

    def __init__(self, fail=False):
        self.fail, self.default = fail, FakeStream("default")
        self.current, self.ended_pools, self.replays = self.default, [], 0
        self.stack = None
        fake = self

        class Graph:
            fresh = False

            def replay(self):
                fake.replays += 1
                if self.fresh:
                    self.fresh = False
                    return
                static_x, static_y, losses = fake.stack._static
                losses.copy_(fake.stack.eager_step(static_x, static_y))

        class Capture:
            def __init__(self, graph, pool=None, **_):
                self.graph, self.pool = graph, pool

            def __enter__(self):
                fake.current = FakeStream("capture")
                self.before = copy.deepcopy(
                    [(m.model.state_dict(), m.optimizer.state_dict()) for m in fake.stack.members]
                    + [fake.stack.buffers]
                )

            def __exit__(self, *exc):
                if fake.fail:  # nothing ran while "capturing": the step the CPU did run is undone
                    *states, buffers = self.before
                    for member, (model, optimizer) in zip(fake.stack.members, states):
                        member.model.load_state_dict(model)
                        member.optimizer.load_state_dict(optimizer)
                    for name, tensor in fake.stack.buffers.items():
                        tensor.copy_(buffers[name])
                    raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
                fake.current, self.graph.fresh = fake.default, True
                return False

        self.CUDAGraph, self.graph = Graph, Capture

    def install(self, monkeypatch):
        @contextlib.contextmanager
        def stream(s):
            before, self.current = self.current, s
            try:
                yield
            finally:
                self.current = before

        for name, value in {
            "current_stream": lambda device=None: self.current,
            "set_stream": lambda s: setattr(self, "current", s),
            "Stream": lambda device=None: FakeStream("side"),
            "stream": stream,
            "synchronize": lambda device=None: None,
            "current_device": lambda: 0,
            "graph_pool_handle": lambda: (0, 7),
            "CUDAGraph": self.CUDAGraph,
            "graph": self.graph,
        }.items():
            monkeypatch.setattr(torch.cuda, name, value)
        monkeypatch.setattr(torch.cuda.memory, "_cuda_endAllocateToPool", lambda d, p: self.ended_pools.append((d, p)))
        return self


def train_steps(stack_, data):
    return [stack_.step(x, y) for x, y in data]


def eager_losses(data):
    eager = stack.Stack(members(), CPU, graph=False)
    return [eager.eager_step(x, y) for x, y in data]


# -- the defects -----------------------------------------------------------------------------------------------
def test_the_stacked_forward_runs_attention_on_the_math_backend(monkeypatch):
    seen, real = [], F.scaled_dot_product_attention

    def recording(*args, **kwargs):
        backends = torch.backends.cuda
        seen.append(
            (
                backends.flash_sdp_enabled(),
                backends.mem_efficient_sdp_enabled(),
                backends.cudnn_sdp_enabled(),
                backends.math_sdp_enabled(),
            )
        )
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", recording)
    ((x, y),) = batches([8])
    stack.Stack(members(), CPU, graph=False).eager_step(x, y)
    assert seen and all(flags == (False, False, False, True) for flags in seen)  # fused kernels off, math on
    seen.clear()
    members()[0].model(x[0])  # one run alone keeps PyTorch's choice (and the numbers its records hold)
    assert seen == [(True, True, True, True)]


def test_a_stack_lists_its_members_parameters_once(monkeypatch):
    built = members()
    stack_ = stack.Stack(built, CPU, graph=False)
    calls = []
    for member in built:
        real = member.model.named_parameters
        monkeypatch.setattr(
            member.model, "named_parameters", lambda *a, real=real, **k: calls.append(1) or real(*a, **k)
        )
    train_steps(stack_, batches([8, 8, 8]))
    assert calls == []


def test_a_failed_capture_restores_the_stream_and_the_allocator_warns_once_and_trains_on(monkeypatch):
    fake = FakeCuda(fail=True).install(monkeypatch)
    data = batches([8] * 7)
    graphed = fake.stack = stack.Stack(members(), CUDA)
    with pytest.warns(UserWarning, match="could not be captured") as caught:
        losses = train_steps(graphed, data)
    assert len([w for w in caught if "captured" in str(w.message)]) == 1
    assert fake.current is fake.default  # the capture stream is no longer current
    assert fake.ended_pools == [(0, (0, 7))]  # the allocator no longer routes this stream's memory to the pool
    assert graphed.graph is None and "operation not permitted" in graphed.graph_failed
    assert all(torch.equal(a, b) for a, b in zip(losses, eager_losses(data), strict=True))  # the same numbers


def test_only_a_full_batch_is_captured_and_replays_give_the_eager_numbers(monkeypatch):
    fake = FakeCuda().install(monkeypatch)
    data = batches([8, 8, 8, 5, 8, 8, 8, 5])  # the 4th step, where the warm-up ends, is a short last batch
    graphed = fake.stack = stack.Stack(members(), CUDA)
    losses = train_steps(graphed, data)
    assert graphed.graph is not None and tuple(graphed._static[0].shape) == (3, 8, 1, 28, 28)
    assert fake.replays == 3  # the capture's own step and the two full batches after it; short ones run eagerly
    assert all(torch.equal(a, b) for a, b in zip(losses, eager_losses(data), strict=True))


def test_a_replay_returns_a_tensor_of_its_own(monkeypatch):
    fake = FakeCuda().install(monkeypatch)
    data = batches([8] * 6)
    fake.stack = graphed = stack.Stack(members(), CUDA)
    kept = train_steps(graphed, data)  # steps 5 and 6 are replays of one graph, writing the same output tensor
    assert kept[4] is not kept[5] and not torch.equal(kept[4], kept[5])
    assert torch.equal(kept[4], eager_losses(data)[4])


def test_the_members_augmentation_is_one_batched_pass_giving_each_member_its_own_stream(monkeypatch):
    images = torch.randint(0, 256, (50, 1, 28, 28), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    train = ImageSet(images, torch.randint(0, 10, (50,)), augment=True)
    seeds = [11, 12, 13]
    calls, real = [], augment._apply_params
    monkeypatch.setattr(augment, "_apply_params", lambda x, p: calls.append(len(x)) or real(x, p))
    built = members("DNNBN_d3")
    stack.train_epoch(
        stack.Stack(built, CPU), train, batch_size=20, generators=[torch.Generator().manual_seed(s) for s in seeds]
    )
    assert calls == [60, 60, 30]  # one pass per step over the three members' images, not one per member
    together = list(train.stacked_batches(20, [torch.Generator().manual_seed(s) for s in seeds], min_batch=2))
    for i, seed in enumerate(seeds):
        alone = list(train.batches(20, generator=torch.Generator().manual_seed(seed), shuffle=True, min_batch=2))
        assert len(alone) == len(together) == 3
        for (x, y), (xs, ys) in zip(alone, together):
            assert torch.equal(xs[i], x) and torch.equal(ys[i], y)  # bit for bit what its run alone draws


def test_the_members_adam_is_fused_and_on_a_gpu_capturable():
    model = build_model("DNN_d3")
    on_cpu, on_gpu = stack.optimizer_for(model, 1e-3, CPU), stack.optimizer_for(model, 1e-3, CUDA)
    assert on_cpu.param_groups[0]["fused"] and not on_cpu.param_groups[0]["capturable"]
    assert on_gpu.param_groups[0]["fused"] and on_gpu.param_groups[0]["capturable"]  # torch captures only these
