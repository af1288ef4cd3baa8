"""`ffnbench params [overrides]`: the documents' FFN table recomputed, and the same breakdown for any config.

    python -m ffnbench params                                   # BERT-base, GPT-2 small, LLaMA-7B
    python -m ffnbench params model=tiny ffn=swiglu ffn.budget=4   # ... plus this config's model
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from ffnbench.cli import user_errors_exit
from ffnbench.model.accounting import ParamBreakdown, bytes_of, count_flops, count_params, ffn_forward_flops
from ffnbench.model.ffn import FFNSpec, ffn_param_count
from ffnbench.model.model import ModelConfig
from ffnbench.model.reference import DOC_SEQ_LEN, reference_model, reference_models


def _mb(n_bytes: int) -> str:
    return f"{n_bytes / 1e6:,.1f} MB"


def breakdown_rows(cfg: ModelConfig) -> list[tuple[str, str]]:
    """(label, value) rows describing one model: sizes, parameter split, bytes and FLOPs."""
    p: ParamBreakdown = count_params(cfg)
    f = count_flops(cfg)
    spec = cfg.ffn
    rows = [
        ("FFN", f"{spec.act} ({'gated, 3 matrices' if spec.gated else 'ungated, 2 matrices'}), "
                f"bias={'on' if spec.bias else 'off'}, {spec.sizing} {spec.ratio:g}"),
        ("d_model / n_layer / n_head", f"{cfg.d_model} / {cfg.n_layer} / {cfg.n_head}"),
        ("d_ff (nominal → actual)", f"{p.nominal_d_ff:.2f} → {p.d_ff} (multiple_of {spec.multiple_of})"),
        ("FFN params / layer", f"{p.ffn_per_layer:,}"),
        ("attention params / layer", f"{p.attention_per_layer:,}"),
        ("FFN share of FFN+attention", f"{p.ffn_share:.1%}"),
        ("FFN fp32 bytes / layer", f"{_mb(bytes_of(p.ffn_per_layer))} ({bytes_of(p.ffn_per_layer):,} B)"),
        (f"FFN fp32 bytes × {cfg.n_layer} layers", _mb(bytes_of(p.ffn_total))),
        (f"FFN forward FLOPs / layer, n={DOC_SEQ_LEN}",
         f"{ffn_forward_flops(DOC_SEQ_LEN, cfg.d_model, p.d_ff, spec.gated):.3e}"),
        ("params: total / non-embedding", f"{p.total:,} / {p.non_embedding:,}"),
        (f"training FLOPs / token (T={f.seq_len})", f"{f.training:.3e}"),
    ]
    if spec.sizing == "budget":
        rows.insert(4, ("budget mismatch vs ungated FFN", f"{p.ffn_mismatch:+.3%}"))
    return rows


def documents_table() -> Table:
    table = Table(title="The documents' FFN table, recomputed (claims C2, C10, C11, C12)")
    for col in ("model", "d_model", "d_ff", "FFN params/layer", "attention/layer", "FFN share",
                "FFN fp32/layer", "× layers", f"FFN FLOPs/layer n={DOC_SEQ_LEN}"):
        table.add_column(col, justify="right" if col != "model" else "left")
    for ref in reference_models():
        p = count_params(ref.cfg)
        table.add_row(
            f"{ref.name}\n[dim]{ref.note}[/dim]",
            str(ref.cfg.d_model),
            str(p.d_ff),
            f"{p.ffn_per_layer:,}",
            f"{p.attention_per_layer:,}",
            f"{p.ffn_share:.1%}",
            _mb(bytes_of(p.ffn_per_layer)),
            f"{_mb(bytes_of(p.ffn_total))} ({ref.cfg.n_layer})",
            f"{ffn_forward_flops(DOC_SEQ_LEN, ref.cfg.d_model, p.d_ff, ref.cfg.ffn.gated):.3e}",
        )
    return table


def derivations() -> list[str]:
    """The two sizing facts the documents state, recomputed from the sizing functions."""
    llama = reference_model("LLaMA-7B").cfg
    p = count_params(llama)
    d = 768
    swiglu = count_params(ModelConfig(d_model=d, n_head=12, ffn=FFNSpec("swiglu", budget=4)))
    return [
        f"LLaMA-7B d_ff: 2/3·4·{llama.d_model} = {p.nominal_d_ff:.2f} → rounded up to a multiple of "
        f"{llama.ffn.multiple_of} = {p.d_ff} (= {p.d_ff // llama.ffn.multiple_of}·{llama.ffn.multiple_of})",
        f"SwiGLU at 8/3·d (d={d}): d_ff = {swiglu.d_ff}, 3·d·d_ff = {swiglu.ffn_per_layer:,} = 8·d² = "
        f"{8 * d * d:,}; a 4× ungated FFN without bias: 2·d·4d = {ffn_param_count(d, 4 * d, False, False):,}",
    ]


@user_errors_exit
def main(argv: list[str] | None = None) -> None:
    overrides = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in overrides):
        print("usage: ffnbench params [HYDRA_OVERRIDES ...]\n\nThe documents' FFN parameter and FLOP table (BERT-base, "
              "GPT-2 small, LLaMA-7B) and its derivations;\nwith overrides (e.g. model=tiny ffn=swiglu), also that "
              "config's parameter and FLOP breakdown.")
        return
    mcfg = None
    if overrides:  # compose first, so a bad override fails before anything is printed
        from ffnbench.config.compose import compose
        from ffnbench.config.schema import model_config
        from ffnbench.data.tokenizer import vocab_size_for

        cfg = compose(overrides)
        mcfg = model_config(cfg, vocab_size_for(cfg.data))
    console = Console(width=160)
    console.print(documents_table())
    for line in derivations():
        console.print("  " + line)
    if mcfg is not None:
        table = Table(title=f"This config: {' '.join(overrides)}")
        table.add_column("quantity")
        table.add_column("value", justify="right")
        for label, value in breakdown_rows(mcfg):
            table.add_row(label, value)
        console.print(table)


if __name__ == "__main__":
    main()
