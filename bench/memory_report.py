"""The tables and figures of `bench.memory`: reductions against each baseline, in MiB.

Owns the printing and the JSON figures of finished runs. It must not measure anything:
`bench.memory` runs the gateways and `bench.memory_samples` reads /proc.
"""

from __future__ import annotations

from typing import Any

from bench.memory_samples import MIB, ModeRun, Sample


def reduction_pct(baseline_bytes: int, shared_bytes: int) -> float:
    return round(100.0 * (1.0 - shared_bytes / baseline_bytes), 1) if baseline_bytes else 0.0


def mib(value_bytes: float) -> float:
    return round(value_bytes / MIB, 1)


def print_model_table(model: str, private: ModeRun, store: ModeRun) -> None:
    print(f"\n{model}: sum of worker Pss + store tmpfs bytes (MiB); zygote Pss not counted")
    print(
        f"{'N':>3} {'private':>9} {'store':>9} {'reduct%':>8} {'store dedup':>12} "
        f"{'reduct% dedup':>14} {'priv/worker':>12} {'store/worker':>13} {'store files':>12} "
        f"{'templates':>9} {'zygote':>7}"
    )
    for count, base in private.samples.items():
        shared = store.samples.get(count)
        if shared is None:
            continue
        print(
            f"{count:3d} {base.total_bytes / MIB:9.0f} {shared.total_bytes / MIB:9.0f} "
            f"{reduction_pct(base.total_bytes, shared.total_bytes):8.1f} "
            f"{shared.dedup_bytes / MIB:12.0f} "
            f"{reduction_pct(base.total_bytes, shared.dedup_bytes):14.1f} "
            f"{base.workers_pss_bytes / len(base.workers) / MIB:12.1f} "
            f"{shared.workers_pss_bytes / len(shared.workers) / MIB:13.1f} "
            f"{shared.store_bytes / MIB:12.1f} {shared.templates_pss_bytes / MIB:9.1f} "
            f"{shared.zygote_pss_bytes / MIB:7.0f}"
        )
    for run in (private, store):
        for count, reason in run.skipped.items():
            print(f"  {run.mode}: N={count} and above skipped: {reason}")
    largest = max((c for c in private.samples if c in store.samples), default=None)
    if largest is not None:
        worker = store.samples[largest].workers[0]
        base_worker = private.samples[largest].workers[0]
        print(
            f"  one worker at N={largest} (MiB): private anon "
            f"{base_worker.pss_anon_bytes / MIB:.1f} file "
            f"{base_worker.pss_file_bytes / MIB:.1f}; store anon "
            f"{worker.pss_anon_bytes / MIB:.1f} file {worker.pss_file_bytes / MIB:.1f} "
            f"shmem {worker.pss_shmem_bytes / MIB:.1f} (store maps "
            f"{worker.store_mapped_pss_bytes / MIB:.1f})"
        )


def model_figures(
    runs: dict[str, dict[str, ModeRun]], figures: dict[str, Any], absolute: dict[str, Any]
) -> dict[str, dict[str, float]]:
    """Print each model's table; fill `figures` (reduction_pct) and `absolute` (MiB)."""
    reductions_dedup: dict[str, dict[str, float]] = {}
    store_only: dict[str, dict[str, float]] = figures.setdefault("store_only_reduction_pct", {})
    for model, modes in runs.items():
        replicas, private, store = modes["replicas"], modes["private"], modes["store"]
        print("\nbaseline: conventional replicas (a fresh process each, its own weights)")
        print_model_table(model, replicas, store)
        print("\nbaseline: zygote-forked workers with private weights (the store's effect alone)")
        print_model_table(model, private, store)
        common = [c for c in replicas.samples if c in store.samples]
        figures[model] = {
            str(c): reduction_pct(replicas.samples[c].total_bytes, store.samples[c].total_bytes)
            for c in common
        }
        store_only[model] = {
            str(c): reduction_pct(private.samples[c].total_bytes, store.samples[c].total_bytes)
            for c in private.samples
            if c in store.samples
        }
        reductions_dedup[model] = {
            str(c): reduction_pct(replicas.samples[c].total_bytes, store.samples[c].dedup_bytes)
            for c in common
        }
        first = next(iter(store.samples.values()), None)
        absolute[model] = {
            "replicas": {str(c): mib(s.total_bytes) for c, s in replicas.samples.items()},
            "private": {str(c): mib(s.total_bytes) for c, s in private.samples.items()},
            "store": {str(c): mib(s.total_bytes) for c, s in store.samples.items()},
            "store_dedup": {str(c): mib(s.dedup_bytes) for c, s in store.samples.items()},
            "store_files": {str(c): mib(s.store_bytes) for c, s in store.samples.items()},
            "zygote_pss": None if first is None else mib(first.zygote_pss_bytes),
        }
        skipped = {
            f"{r.mode}:{c}": why for r in (replicas, private, store) for c, why in r.skipped.items()
        }
        if skipped:
            absolute[model]["skipped"] = skipped
    return reductions_dedup


def transfer_figures(
    transfer: dict[str, Sample], figures: dict[str, Any], absolute: dict[str, Any]
) -> None:
    base = transfer["private"].total_bytes
    print("\nresnet-50-tl-a..d, one instance each (MiB)")
    print(f"{'mode':28} {'total':>8} {'dedup':>8} {'store files':>12} {'reduct% vs private':>19}")
    for label, sample in transfer.items():
        print(
            f"{label:28} {sample.total_bytes / MIB:8.0f} {sample.dedup_bytes / MIB:8.0f} "
            f"{sample.store_bytes / MIB:12.1f} {reduction_pct(base, sample.total_bytes):19.1f}"
        )
    shared = transfer["store_shared_tenant"]
    separate = transfer["store_per_function_tenant"]
    figures["cross_function_reduction_pct"] = reduction_pct(base, shared.total_bytes)
    figures["cross_function_reduction_pct_dedup"] = reduction_pct(base, shared.dedup_bytes)
    figures["cross_function_reduction_vs_per_function_store_pct"] = reduction_pct(
        separate.total_bytes, shared.total_bytes
    )
    absolute["transfer_learning"] = {
        label: {"total": mib(s.total_bytes), "dedup": mib(s.dedup_bytes)}
        for label, s in transfer.items()
    }
