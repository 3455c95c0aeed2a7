"""Command functions ``curve`` and ``calibrate`` for the main typer app.

They are plain functions with typer option annotations; the application
registers them (``app.command("curve")(curve)``). Bad input raises
:class:`~unicron_plan.errors.InvalidInstanceError`, which the application
maps to exit code 2.

Example::

    unicron-plan curve gpt3-175b --gpu-type a100 --global-batch 1536 --seq-len 2048 --gpus 384,768 --json
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from unicron_plan.errors import InvalidInstanceError


def parse_gpus(text: Optional[str]) -> Optional[list[int]]:
    """``"8,16,32"`` -> [8, 16, 32]; InvalidInstanceError on anything else."""
    if text is None:
        return None
    out = []
    for k, part in enumerate(text.split(",")):
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            raise InvalidInstanceError("--gpus", f"item {k} {part!r} is not an integer >= 1 (use N[,N...])")
        out.append(int(part))
    return out


def write_plot(curve, path: Path) -> None:
    """Draw hardware and model TFLOP/s per GPU and aggregate PFLOP/s; write the PNG atomically."""
    from unicron_plan.extras import require

    require("matplotlib", "curve --plot")
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    path = Path(path)
    if not path.parent.exists():
        raise InvalidInstanceError("--plot", f"directory {str(path.parent)!r} does not exist")
    n = [p.gpus for p in curve.points]
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(n, [p.hardware_tflops_per_gpu for p in curve.points], "o-", label="hardware TFLOP/s per GPU")
    ax.plot(n, [p.model_tflops_per_gpu for p in curve.points], "s--", label="model TFLOP/s per GPU")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("TFLOP/s per GPU")
    ax2 = ax.twinx()
    ax2.plot(n, [p.hardware_tflops_per_gpu * p.gpus / 1000 for p in curve.points], "^:", color="grey",
             label="aggregate hardware PFLOP/s")
    ax2.set_ylabel("aggregate PFLOP/s")
    ax.set_title(f"{curve.model} on {curve.gpu_type}, batch {curve.global_batch} x {curve.seq_len}, "
                 f"recompute {curve.recompute}")
    ax.legend(loc="lower left", fontsize=8)
    ax2.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    from unicron_plan.io import save_figure_atomic

    save_figure_atomic(fig, path)


def curve(
    model: Annotated[str, typer.Argument(help="Model of the library, e.g. gpt3-175b.")],
    gpu_type: Annotated[str, typer.Option("--gpu-type", help="GPU type, e.g. a100.")],
    global_batch: Annotated[int, typer.Option("--global-batch", help="Sequences per iteration.")],
    seq_len: Annotated[int, typer.Option("--seq-len", help="Tokens per sequence.")],
    gpus: Annotated[Optional[str], typer.Option("--gpus", help="GPU counts N[,N...] (default: all up to --max-gpus).")] = None,
    recompute: Annotated[str, typer.Option(
        "--recompute", help="auto (per count the fastest mode that fits) | full | selective | none")] = "auto",
    efficiency: Annotated[Optional[Path], typer.Option(
        "--efficiency", help="Efficiency JSON written by `unicron-plan calibrate` (default: the packaged constants).")] = None,
    stack: Annotated[Optional[str], typer.Option(
        "--stack", help="Software stack of the efficiency file (default: the GPU type's), e.g. megatron-core-fp8.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the curve JSON (docs/format.md).")] = False,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Write the curve as a PNG here.")] = None,
    max_gpus: Annotated[int, typer.Option("--max-gpus", help="Largest GPU count without --gpus.")] = 1024,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress spinner on stderr.")] = False,
) -> None:
    """Derive the best layout and throughput per GPU count of a model.

    Exits 1 (with the reason on stderr) when no requested count has a valid layout that fits.
    """
    import sys

    from unicron_plan.progress import working
    from unicron_plan.perf import derive_table

    with working(f"searching layouts of {model}", quiet):
        c = derive_table(model, gpu_type, global_batch, seq_len, recompute=recompute,
                         max_gpus=None if gpus else max_gpus, gpus=parse_gpus(gpus),
                         efficiency_file=None if efficiency is None else str(efficiency), stack=stack)
    if not c.points:
        typer.echo(f"error: {model} has no valid layout that fits on {gpu_type} at the requested GPU counts "
                   f"(global batch {global_batch}, sequence length {seq_len}, recompute {recompute})", err=True)
        raise typer.Exit(1)
    if plot is not None:
        write_plot(c, plot)
    if json_out:
        typer.echo(c.to_json())
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{model} on {gpu_type}, batch {global_batch} x {seq_len}, recompute {recompute}")
    for col in ("GPUs", "tp", "pp", "dp", "ep", "cp", "micro", "v", "recompute", "hw TFLOP/s/GPU", "model TFLOP/s/GPU",
                "MFU", "tokens/s", "GiB/GPU"):
        t.add_column(col, justify="right", no_wrap=True)
    for p in c.points:
        t.add_row(str(p.gpus), str(p.tp), str(p.pp), str(p.dp), str(p.ep), str(p.cp), str(p.micro_batch), str(p.virtual_stages),
                  p.recompute, f"{p.hardware_tflops_per_gpu:.1f}", f"{p.model_tflops_per_gpu:.1f}",
                  f"{p.mfu:.3f}", f"{p.tokens_per_second:.4g}", f"{p.memory_gib_per_gpu:.1f}")
    # Piped to a file or another program, the table keeps every column at its full width.
    Console(width=None if sys.stdout.isatty() else 240).print(t)


def calibrate(
    points: Annotated[Path, typer.Argument(help="JSON file of measured points (`unicron-plan schema points`).")],
    out: Annotated[Path, typer.Option("--out", help="Efficiency JSON file to write.")],
    base: Annotated[Optional[Path], typer.Option("--base", help="Efficiency file to start from.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress spinner on stderr.")] = False,
) -> None:
    """Fit a GPU type's efficiency constants to measured iterations; write a new efficiency file.

    Exits 1 with the reason, writing nothing, when no constants explain the points.
    """
    from unicron_plan.progress import working
    from unicron_plan.perf.calibrate import calibrate as run

    with working("fitting the constants", quiet):
        consts = run(str(points), str(out), None if base is None else str(base))
    typer.echo(json.dumps(consts, indent=1, sort_keys=True))
