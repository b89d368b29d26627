"""`python -m infless.sim.export`: write the simulator's latency and memory data from a
profile database (`infless profile`), so simulations run on measurements without needing
`state/` (or torch) at run time.

    python -m infless.sim.export --state-dir STATE [--models NAMES] [--out infless/sim/data]

For every model whose operators are profiled in STATE: the combined-operator prediction
without its safety offset (`CombinedOperatorPredictor.predict_raw_ms`, at the profiles'
typical machine speed) at batch sizes 1…32 and every profiled thread count, written as
INFless's reference profile rows (`cpu_latency.tsv`: `<model> <cpuThreads> <gpuPercent>
<batch> <latency_ms>`), and per model its weights, activations per sample and number of
compute operators (`models.json`, beside the GPU assumption the simulator reads there:
`sim.latency`). Reads files only; the predictor is torch-free.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from infless.scaling.profiled import cached_graph, load_profiled_predictor
from infless.sim.latency import DATA_DIR, MODELS_FILE, TABLE_FILE

BATCHES = (1, 2, 4, 8, 16, 32)
TABLE1 = (  # INFless Table 1's models (the zoo builds each)
    "bert-v1",
    "resnet-50",
    "vggnet",
    "lstm-2365",
    "resnet-20",
    "ssd",
    "dssm-2365",
    "yamnet",
    "mobilenet",
    "textcnn-69",
    "mnist",
)


def export(state_dir: Path, names: Sequence[str], out: Path, threads: Sequence[int]) -> list[str]:
    """Write the table and the models' memory figures; returns the models written."""
    predictor = load_profiled_predictor(state_dir, names)
    if predictor is None:
        raise SystemExit(f"{state_dir}: no profiled model among {', '.join(names)}")
    models_path = out / MODELS_FILE
    document = json.loads(models_path.read_text(encoding="utf-8"))
    lines = [
        "# <model> <cpuThreads> <gpuPercent> <batch> <latency_ms>: `infless profile`'s",
        "# combined-operator prediction without its offset (python -m infless.sim.export)",
    ]
    written = []
    for name in predictor.models():
        graph = cached_graph(state_dir, name)
        if graph is None:
            continue
        for cpus in threads:
            for b in BATCHES:
                ms = predictor.predict_raw_ms(name, b, cpus)
                lines.append(f"{name} {cpus} 0 {b} {ms:.4f}")
        entry = document["models"].setdefault(name, {})
        entry.update(
            weight_bytes=graph.weight_bytes,
            activation_bytes_per_sample=graph.activation_bytes_per_sample(),
            compute_nodes=sum(1 for n in graph.nodes if n.cost_class == "compute"),
        )
        written.append(name)
    (out / TABLE_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    models_path.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infless.sim.export", description=__doc__)
    parser.add_argument("--state-dir", type=Path, required=True, help="where infless profile ran")
    parser.add_argument("--models", nargs="+", default=list(TABLE1), help="zoo model names")
    parser.add_argument("--threads", default="1,2", help="profiled thread counts (default 1,2)")
    parser.add_argument("--out", type=Path, default=DATA_DIR, help="the data directory")
    args = parser.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    written = export(args.state_dir, args.models, args.out, threads)
    print(f"wrote {len(written)} models to {args.out}: {', '.join(written)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
