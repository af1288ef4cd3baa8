"""C2, C10, C11, C12: the articles' numbers, recomputed exactly from the sizing and accounting functions on
the reference models (docs/claims.md §C2, §C10–§C12). No run is needed."""

from __future__ import annotations

from ffnbench.claims.claim import Evidence, Observations
from ffnbench.model.accounting import ParamBreakdown, bytes_of, count_params, ffn_forward_flops
from ffnbench.model.ffn import FeedForward, FFNSpec, size_ffn
from ffnbench.model.reference import DOC_SEQ_LEN, reference_model, reference_models
from ffnbench.stats.verdicts import CONTRADICTED, SUPPORTED, Verdict


def _ref_params() -> dict[str, ParamBreakdown]:
    return {m.name: count_params(m.cfg) for m in reference_models()}


def _exact(ok: bool, reason: str) -> Verdict:
    """An exact check: supported when the numbers agree, contradicted otherwise."""
    return Verdict(SUPPORTED if ok else CONTRADICTED, reason)


def c2(obs: Observations) -> Evidence:
    d = 768
    swiglu = size_ffn(FFNSpec("swiglu", budget=4), d)
    ungated = size_ffn(FFNSpec("gelu", width=4), d)
    llama = reference_model("LLaMA-7B")
    lsize = size_ffn(llama.cfg.ffn, llama.cfg.d_model)
    equal = swiglu.params == ungated.params == 8 * d * d
    llama_ok = lsize.d_ff == 11008 and f"{lsize.nominal_d_ff:.2f}" == "10922.67"
    ev = Evidence(parts=[
        ("3·d·(8/3·d) = 2·d·4d = 8d²",
         _exact(equal, f"{swiglu.params:,} vs {ungated.params:,} vs 8d² = {8 * d * d:,}")),
        ("LLaMA-7B d_ff", _exact(llama_ok, f"2/3·4·4096 = {lsize.nominal_d_ff:.2f} → {lsize.d_ff}")),
    ])
    ev.effect = (f"d={d}: SwiGLU d_ff {swiglu.d_ff}, 3·d·d_ff = {swiglu.params:,} = 2·d·4d = {ungated.params:,}; "
                 f"LLaMA-7B: {lsize.nominal_d_ff:.2f} → {lsize.d_ff} = {lsize.d_ff // 256}·256")
    ev.details = [
        f"- d_model {d}: SwiGLU at budget 4 → d_ff = {swiglu.d_ff} (nominal {swiglu.nominal_d_ff:.2f}), "
        f"{swiglu.params:,} params; 4× ungated FFN: {ungated.params:,}; 8·d² = {8 * d * d:,}",
        f"- LLaMA-7B (d_model 4096, multiple_of 256): nominal {lsize.nominal_d_ff:.2f}, rounded up to {lsize.d_ff} "
        f"({lsize.params:,} params, {lsize.mismatch:+.3%} off the 4× budget)",
    ]
    gated = sorted({(r.act, r.d_model, r.ratio, r.d_ff, r.ffn_params, r.budget_mismatch, r.max_mismatch)
                    for r in obs.runs if r.gated and r.sizing == "budget"})
    if gated:
        ev.details += ["", "Budget match of the trained gated runs:", "",
                       "| variant | d_model | budget | d_ff | FFN params/layer | mismatch | within max_mismatch |",
                       "|---|---|---|---|---|---|---|"]
        ev.details += [f"| {a} | {dm} | {r:g}× | {dff} | {p:,} | {m:+.3%} | {'yes' if abs(m) <= mx else '**no**'} |"
                       for a, dm, r, dff, p, m, mx in gated]
    return ev


def c10(obs: Observations) -> Evidence:
    refs = _ref_params()
    shares = {name: p.ffn_share for name, p in refs.items()}
    bert = refs["BERT-base"]
    share_ok = all(abs(s - 2 / 3) < 0.01 for s in shares.values())
    bert_ok = round(bert.ffn_per_layer / 1e6, 1) == 4.7 and round(bert.attention_per_layer / 1e6, 1) == 2.4
    ev = Evidence(parts=[
        ("FFN ≈ 2/3 of FFN + attention", _exact(share_ok, ", ".join(f"{k} {v:.1%}" for k, v in shares.items()))),
        ("BERT-base 4.7M vs 2.4M",
         _exact(bert_ok, f"FFN {bert.ffn_per_layer:,}, attention {bert.attention_per_layer:,}")),
    ])
    ev.effect = ", ".join(f"{k}: FFN share {v:.1%}" for k, v in shares.items())
    ev.details = [f"- {name}: FFN {p.ffn_per_layer:,} / attention {p.attention_per_layer:,} params per layer; FFN is "
                  f"{p.ffn_share:.2%} of FFN + attention ({p.ffn_per_layer / p.block:.2%} of the block with its norms)"
                  for name, p in refs.items()]
    return ev


def measured_ffn_flops(d_model: int, spec: FFNSpec, n_tokens: int) -> int:
    """Forward FLOPs of one FeedForward over n tokens as torch's FlopCounterMode counts them (on the meta
    device: shapes only, nothing is computed)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        ffn = FeedForward(d_model, spec)
        x = torch.zeros(1, n_tokens, d_model)
    with FlopCounterMode(display=False) as counter:
        ffn(x)
    return int(counter.get_total_flops())


def c11(obs: Observations) -> Evidence:
    bert = reference_model("BERT-base").cfg
    d, n = bert.d_model, DOC_SEQ_LEN
    d_ff = size_ffn(bert.ffn, d).d_ff
    formula = 4 * n * d * d_ff
    analytic = ffn_forward_flops(n, d, d_ff, bert.ffn.gated)
    measured = measured_ffn_flops(d, bert.ffn, n)
    ev = Evidence(parts=[
        ("4·n·d·d_ff = accounting = FlopCounterMode", _exact(formula == analytic == measured,
                                                             f"{formula:,} / {analytic:,} / {measured:,}")),
        ("≈ 4.8e9 for BERT-base, n = 512", _exact(f"{formula:.1e}" == "4.8e+09", f"{formula:.4g}")),
    ])
    ev.effect = f"4·{n}·{d}·{d_ff} = {formula:.4g}; FlopCounterMode: {measured:.4g}"
    ev.details = [f"- formula 4·n·d·d_ff: {formula:,}", f"- ffnbench.model.accounting.ffn_forward_flops: {analytic:,}",
                  f"- torch FlopCounterMode on a BERT-base FeedForward (GELU, biases) over {n} tokens: {measured:,} "
                  "(biases and the activation are not matmul FLOPs and are not counted)"]
    return ev


def c12(obs: Observations) -> Evidence:
    refs = _ref_params()
    bert = refs["BERT-base"]
    checks = [
        ("BERT-base 4.7M/layer", round(bert.ffn_per_layer / 1e6, 1) == 4.7, f"{bert.ffn_per_layer:,}"),
        ("GPT-2 small 4.7M/layer", round(refs["GPT-2 small"].ffn_per_layer / 1e6, 1) == 4.7,
         f"{refs['GPT-2 small'].ffn_per_layer:,}"),
        ("LLaMA-7B ≈135M/layer", round(refs["LLaMA-7B"].ffn_per_layer / 1e6) == 135,
         f"{refs['LLaMA-7B'].ffn_per_layer:,}"),
        ("18.9 MB/layer fp32", round(bytes_of(bert.ffn_per_layer) / 1e6, 1) == 18.9,
         f"{bytes_of(bert.ffn_per_layer):,} B"),
        ("≈227 MB for 12 layers", round(bytes_of(bert.ffn_total) / 1e6) == 227, f"{bytes_of(bert.ffn_total):,} B"),
    ]
    ev = Evidence(parts=[(label, _exact(ok, value)) for label, ok, value in checks])
    ev.effect = "; ".join(f"{label.split(' ')[0]} {value}" for label, _, value in checks[:3]) + \
        f"; {bytes_of(bert.ffn_per_layer) / 1e6:.1f} MB, {bytes_of(bert.ffn_total) / 1e6:.1f} MB"
    ev.details = [f"- {label}: {value} → {'matches' if ok else '**does not match**'}" for label, ok, value in checks]
    return ev
