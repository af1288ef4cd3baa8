"""The chunked loss (model.chunked_loss, LossHead): the same loss and gradients as F.cross_entropy on the full fp32
logits, eager and compiled, z-loss included, without ever building a (tokens × vocab) tensor.

Tolerance: chunking changes only the order of fp32 sums (the mean over tokens, ∂/∂wte over the chunks) and computes
the softmax gradient by hand instead of through log_softmax's backward, so values and gradients agree to a few fp32
ulps of their size: rtol 1e-5 and an atol of 1e-6 of the largest gradient entry (ASSERT)."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ffnbench.model import model as model_module
from ffnbench.model.ffn import FFNSpec
from ffnbench.model.model import GPT, LossHead, ModelConfig, chunked_loss

N, D, V = 45, 16, 40  # 45 tokens: chunks of 8 leave a short last one


def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6 * float(expected.detach().abs().max()))


def head_inputs(seed: int = 0, scale: float = 3.0):
    """Final hidden states, a head and targets; `scale` spreads the logits so the softmax is far from uniform."""
    g = torch.Generator().manual_seed(seed)
    h = (scale * torch.randn(N, D, generator=g)).requires_grad_()
    w = torch.randn(V, D, generator=g).requires_grad_()
    return h, w, torch.randint(0, V, (N,), generator=g)


def plain(h, w, t, z_loss=0.0):
    """The reference: F.cross_entropy (and PaLM's z-loss) on the full fp32 logits, eager."""
    logits = F.linear(h, w).float()
    return F.cross_entropy(logits, t) + z_loss * torch.logsumexp(logits, -1).square().mean()


@pytest.mark.parametrize("z_loss", [0.0, 1e-2])
@pytest.mark.parametrize("chunk", [1, 8, N, 1000])
def test_chunked_loss_and_its_gradients_equal_cross_entropy_on_the_full_logits(chunk, z_loss):
    h, w, t = head_inputs()
    expected = plain(h, w, t, z_loss)
    grads = torch.autograd.grad(expected, (h, w))
    loss = chunked_loss(h, w, t, chunk, z_loss)
    close(loss, expected)
    for got, want in zip(torch.autograd.grad(loss, (h, w)), grads, strict=True):
        close(got, want)
    with torch.no_grad():  # validation's path: no gradient computed, the same value
        close(chunked_loss(h, w, t, chunk, z_loss), expected.detach())


def test_the_backward_scales_the_gradient_it_is_handed():
    # a loss scaler (fp16) or any factor in front of the loss reaches both gradients
    h, w, t = head_inputs()
    grads = torch.autograd.grad(3.5 * plain(h, w, t, 1e-2), (h, w))
    for got, want in zip(torch.autograd.grad(3.5 * chunked_loss(h, w, t, 8, 1e-2), (h, w)), grads, strict=True):
        close(got, want)


def test_the_output_embeddings_gradient_does_not_overflow_in_fp16():
    """fp16 matmuls (autocast's on a V100 or T4): 65,536 tokens of one chunk whose hidden states share a component of
    6 sum ∂/∂logits·h to ~390,000 in one column of ∂/∂wte, past fp16's 65,504 (inf, which no loss scale recovers).
    Summed FP16_WTE_TOKENS at a time in fp32, the gradient is finite and equals the fp32 one to fp16's precision."""
    n, d, v = 65536, 8, 4
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(n, d, generator=gen) * 0.1
    h[:, 0] += 6.0  # a shared direction, as LayerNorm outputs can have
    wte = torch.randn(v, d, generator=gen) * 0.02
    targets = torch.zeros(n, dtype=torch.long)  # one token everywhere: its ∂/∂logits ≈ −0.75 at every position
    grads = {}
    for dtype in (torch.float32, torch.float16):
        h_, w_ = h.clone().requires_grad_(), wte.clone().requires_grad_()
        model_module.ChunkedHeadLoss.apply(h_, w_, targets, n, 0.0, dtype).backward()
        grads[dtype] = w_.grad
    assert torch.isfinite(grads[torch.float16]).all()
    assert torch.allclose(grads[torch.float16], grads[torch.float32], rtol=1e-2, atol=1e-3)


def test_per_token_losses_are_cross_entropy_without_reduction_and_refuse_a_gradient():
    h, w, t = head_inputs()
    with torch.no_grad():
        close(chunked_loss(h, w, t, 8, reduction="none"), F.cross_entropy(F.linear(h, w), t, reduction="none"))
    with pytest.raises(ValueError, match="no gradient"):
        chunked_loss(h, w, t, 8, reduction="none")


# aot_eager: dynamo and AOTAutograd trace the autograd.Function as trainer.compile does; inductor's code generation on
# top takes minutes on a loaded CPU (slow).
@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
@pytest.mark.parametrize("z_loss", [0.0, 1e-2])
def test_compiled_chunked_loss_equals_eager_cross_entropy(z_loss, backend):
    torch._dynamo.reset()
    h, w, t = head_inputs(1)
    expected = plain(h, w, t, z_loss)
    grads = torch.autograd.grad(expected, (h, w))
    compiled = torch.compile(chunked_loss, backend=backend)
    loss = compiled(h, w, t, 8, z_loss)
    close(loss, expected)
    for got, want in zip(torch.autograd.grad(loss, (h, w)), grads, strict=True):
        close(got, want)
    with torch.no_grad():
        close(compiled(h, w, t, 8, z_loss), expected.detach())


# ---- through the model: z-loss, the final validation's per-token losses, LossHead's choice -------------------


def tiny(loss_chunk=None, seed=0) -> GPT:
    cfg = ModelConfig(vocab_size=256, seq_len=32, d_model=32, n_layer=1, n_head=4, ffn=FFNSpec("gelu", width=4))
    return GPT(cfg, seed=seed, loss_chunk=loss_chunk)


def batch(b=4):
    g = torch.Generator().manual_seed(5)
    return torch.randint(0, 256, (b, 32), generator=g), torch.randint(0, 256, (b, 32), generator=g)


def loss_and_grads(model, idx, targets, **kw):
    loss = model(idx, targets, **kw)
    return loss, torch.autograd.grad(loss, list(model.parameters()))


@pytest.mark.parametrize("z_loss", [0.0, 1e-2])
def test_the_models_chunked_loss_and_z_loss_equal_the_unchunked(z_loss):
    idx, targets = batch()
    chunked, whole = tiny(loss_chunk=24), tiny()  # 128 tokens: 5 chunks and a short one; whole: the eager CPU default
    with torch.no_grad():
        chunked.wte.weight.mul_(20)  # logits far from 0: the z-loss term far from its value at init
        whole.wte.weight.mul_(20)
    loss, grads = loss_and_grads(chunked, idx, targets, z_loss=z_loss)
    ref, ref_grads = loss_and_grads(whole, idx, targets, z_loss=z_loss)
    close(loss, ref)
    for got, want in zip(grads, ref_grads, strict=True):
        close(got, want)
    with torch.no_grad():
        close(chunked(idx, targets, reduction="none"), whole(idx, targets, reduction="none"))


def test_the_loss_head_chunks_only_where_asked_compiled_or_off_the_cpu(monkeypatch):
    x = torch.zeros(2, 3, 4)
    assert LossHead().tokens_per_chunk(x, 256) is None  # eager on the CPU: the plain loss, bit for bit as before
    assert LossHead(chunk=7).tokens_per_chunk(x, 256) == 7
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert LossHead().tokens_per_chunk(x, 256) == model_module.LOSS_CHUNK_LOGITS // 256
    assert LossHead().tokens_per_chunk(x, 2 * model_module.LOSS_CHUNK_LOGITS) == 1


def test_the_eager_cpu_default_is_the_plain_loss_bit_for_bit():
    idx, targets = batch()
    model = tiny()
    with torch.no_grad():
        logits = model(idx).float().view(-1, 256)
        assert torch.equal(model(idx, targets, reduction="none"), F.cross_entropy(logits, targets.view(-1),
                                                                                  reduction="none"))
        lse = torch.logsumexp(logits, -1)
        assert torch.equal(model(idx, targets, z_loss=1e-2),
                           F.cross_entropy(logits, targets.view(-1)) + 1e-2 * lse.square().mean())


# ---- memory: no (tokens × vocab) tensor, forward or backward --------------------------------------------------


class LargestTensor(TorchDispatchMode):
    """The most elements of any tensor an op returns while active (views included: an upper bound on what is
    allocated), the backward's ops too."""

    def __init__(self):
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.numel = max([self.numel] + [t.numel() for t in tree_leaves(out) if isinstance(t, torch.Tensor)])
        return out


@pytest.mark.parametrize("z_loss", [0.0, 1e-2])
def test_no_full_logits_exist_in_an_eager_step(z_loss):
    idx, targets = batch()
    full = idx.numel() * 256  # B·T·V
    seen = {}
    for chunk in (16, None):
        model = tiny(loss_chunk=chunk)
        with LargestTensor() as probe:
            model(idx, targets, z_loss=z_loss).backward()
            with torch.no_grad():
                model(idx, targets, reduction="none")
        seen[chunk] = probe.numel
    assert seen[None] >= full  # the probe sees the plain loss's logits ...
    assert seen[16] < full  # ... and none in chunks: the largest is the FFN's hidden (B·T·4d) or the head's gradient
    assert seen[16] >= 16 * 256  # one chunk's logits


def graph_sizes(sizes: list[int]):
    """A torch.compile backend that records the size of every tensor in the forward and backward graphs AOTAutograd
    hands the compiler (what inductor would turn into buffers), then runs them eagerly."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def record(gm, example_inputs):
        for node in gm.graph.nodes:
            sizes.extend(t.numel() for t in tree_leaves(node.meta.get("val")) if isinstance(t, torch.Tensor))
        return make_boxed_func(gm.forward)

    return aot_autograd(fw_compiler=record, bw_compiler=record)


def test_no_full_logits_exist_in_the_compiled_graphs_of_the_automatic_chunk(monkeypatch):
    idx, targets = batch()
    full = idx.numel() * 256
    seen = {}
    for budget in (16 * 256, full):  # the automatic chunk (compiled: chunks) of 16 tokens, then of all 128
        monkeypatch.setattr(model_module, "LOSS_CHUNK_LOGITS", budget)
        torch._dynamo.reset()
        model, sizes = tiny(), []
        model.loss_head.compile(backend=graph_sizes(sizes), fullgraph=True)  # no graph break
        model(idx, targets, z_loss=1e-2).backward()
        seen[budget] = max(sizes)
    assert seen[full] >= full  # one chunk of every token: the full logits, which the probe sees ...
    assert seen[16 * 256] < full  # ... and in chunks, none
