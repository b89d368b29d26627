"""Model-less serving against fixed variants, under a load that steps low -> high -> low.

One gateway, one session, three runs of the same open-loop Poisson load (the client on the
same cores, one sample per request, bounded in time and count, loopback only):

1. **model-less**: the model registered with `POST /system/register` (variants generated
   and profiled by the gateway), queries to `/function/{model}` under the `default`
   application's goals (SLO, minimum accuracy): per-query selection (with spill-over to
   the overflow variant) and model-vertical scaling pick the variant; measured once the
   target and overflow variants serve;
2. **fixed V**, for every variant V meeting the SLO and the accuracy goal: V's package
   deployed as an ordinary function, replicated by the same autoscaler (INFless's
   Algorithm 1): horizontal scaling only.

The best fixed variant is the fixed arm with the fewest violations over all rounds (ties:
the more accurate): the one model-less must not be worse than in violations and must
match in accuracy (`verdict`). The profiles' pick (the variant serving the most requests
per core by its profile) is printed beside it: on a host where a variant's larger batches
only just fit half the SLO as profiled, the profiles pick a variant that refuses most of
a peak the others carry, and a verdict against it would say nothing.

The arms run in rounds (`--rounds`, 2 by default): model-less first in odd-numbered rounds
and last in even-numbered ones, the fixed arms rotated (`round_order`), the model registered
again for each of its arms and deleted after it, so that no arm always runs first or holds
cores during another's; each round's table is printed, then every arm over all its rounds,
and the verdict is taken on the totals (and per round).

Before the gateway starts, the fp32 model's in-process limit (`bench.slo_limit`) is
measured in this process, and the peak is printed as a share of it. Per run: requests, SLO
violations (answers later than the SLO, plus refusals and errors), p50/p99, mean accuracy
served (each answer counts its variant's measured accuracy), the core-seconds its
instances held (polled every 0.5 s: starting, ready and draining ones), the vertical
switches and the queries spilled over. The registration's variant table is printed first,
and the selection's cost at 100 variants (`select` over 100 cards) at the end.

    .venv/bin/python -m bench.modelless [--image lstm-2365] [--slo-ms 50] [--min-accuracy 0.95]
        [--low-s 20] [--high-s 30] [--tail-s 40] [--low-rps R] [--high-rps R]
        [--runs modelless,fixed] [--rounds 2] [--limit-s 0.5] [--log-level WARNING]

Prints a table and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import timeit
import urllib.request
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.harness import Gateway, gateway
from bench.modelless_load import Answer, Run, combine, measure, verdict
from loadgen.bodies import make_bodies
from loadgen.functions import parse_function_status

MODEL = "mlbench"


def post(url: str, body: object) -> tuple[int, Any]:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def delete(url: str, body: object | None = None) -> int:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data, {"Content-Type": "application/json"}, method="DELETE"
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def register(gw: Gateway, args: argparse.Namespace) -> dict[str, Any]:
    body = {
        "model": MODEL,
        "image": args.image,
        "sloMs": args.slo_ms,
        "maxBatch": args.max_batch,
        "validation": {"generate": args.validation},
        "variants": args.variants.split(","),
        "cpus": [1],
        "apps": [{"id": "default", "minAccuracy": args.min_accuracy}],
    }
    status, answer = post(gw.url + "/system/register", body)
    if status != 202:
        raise RuntimeError(f"register: {status} {answer}")
    started = time.monotonic()
    while time.monotonic() - started < 1800:
        time.sleep(2.0)
        document: dict[str, Any] = gw.get(f"/system/variants/{MODEL}")
        if document["status"] == "ready":
            return document
        if document["status"] == "failed":
            raise RuntimeError(f"registration failed: {document['error']}")
    raise RuntimeError("registration did not finish in 30 min")


def selection_cost_us() -> float:
    """Median µs of one `select` over 100 variant cards (all Active, goals met by half)."""
    from infless.modelless.cards import VariantCard
    from infless.modelless.profiles import Goals
    from infless.modelless.selection import Catalogue, select
    from infless.modelless.states import VariantState

    cards = [
        VariantCard(
            name=f"v{k}",
            function=f"m--v{k}",
            accuracy=0.9 + k / 1000,
            latency_b1_ms=1.0 + k / 10,
            batch_size=8,
            cpus=1,
            exec_ms=5.0,
            qps=1000.0 - k,
            load_ms=100.0,
            peak_memory_bytes=1 << 20,
        )
        for k in range(100)
    ]
    catalogue = Catalogue.of(cards)
    states = {c.name: VariantState.ACTIVE for c in cards}
    goals = Goals(latency_ms=6.0, min_accuracy=0.95)
    runs = timeit.repeat(lambda: select(catalogue, states, goals), number=1000, repeat=7)
    return round(statistics.median(runs) / 1000 * 1e6, 2)


def in_process_limit(image: str, cell_s: float) -> dict[str, Any] | None:
    """The fp32 model's in-process limit here (`bench.slo_limit`: its forward in this
    process, best items/s over the batch sizes on every core), or None for an image that is
    not a zoo model or with `--limit-s 0`."""
    if cell_s <= 0:
        return None
    from bench.slo_limit import measure as measure_limit
    from infless.models.zoo import ZOO

    if image not in ZOO:
        return None
    costs = measure_limit(image, cell_s)
    return {
        "items_per_s": round(costs.limit_items_per_s, 1),
        "batch": costs.limit_batch,
        "threads": costs.threads,
    }


def wait_serving(gw: Gateway, timeout_s: float = 120.0) -> float:
    """Until the model-less target and overflow variants each have a ready instance (the
    fixed arms are measured from a ready instance too); the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        document = gw.get(f"/system/variants/{MODEL}")
        wanted = {f"{MODEL}--{v}" for v in (document["target"], document["overflow"]) if v}
        ready = {i["function"] for i in gw.get("/system/instances") if i["state"] == "ready"}
        if wanted and wanted <= ready:
            return time.monotonic() - started
        time.sleep(0.5)
    raise RuntimeError(f"the model-less variants did not serve within {timeout_s:g} s")


def print_variants(document: dict[str, Any]) -> None:
    print(
        f"{'variant':<12}{'accuracy':>9}{'b1 ms':>8}{'config':>8}{'qps':>7}"
        f"{'load ms':>9}{'peak MB':>9}"
    )
    for v in document["variants"]:
        b1 = min((p["measured_ms"] for p in v["latency"] if p["batch_size"] == 1), default=0.0)
        config = v.get("config") or {}
        shape = f"b{config['batchSize']}c{config['cpus']}" if config else "-"
        print(
            f"{v['name']:<12}{v.get('accuracy') or 0:>9.4f}{b1:>8.2f}{shape:>8}"
            f"{config.get('qps', 0):>7.0f}{v.get('load_ms') or 0:>9.0f}"
            f"{(v.get('peak_memory_bytes') or 0) / 2**20:>9.0f}"
            + ("" if v["status"] == "ready" else f"  {v['status']}: {v['error'][:60]}")
        )


def print_runs(runs: list[Run]) -> None:
    print(
        f"\n{'run':<16}{'requests':>9}{'viol.':>7}{'429':>6}{'err':>5}{'p50':>7}{'p99':>8}"
        f"{'accuracy':>9}{'core-s':>8}{'switch':>7}{'spill':>7}  variants"
    )
    for run in runs:
        print(
            f"{run.name:<16}{run.requests:>9}{run.violations:>7}{run.refused:>6}{run.errors:>5}"
            f"{run.p50_ms:>7.1f}{run.p99_ms:>8.1f}{run.accuracy:>9.4f}{run.core_s:>8.1f}"
            f"{run.switches:>7}{run.spilled:>7}  {run.by_variant}"
        )
        per_phase = "; ".join(
            f"{p['rate_rps']:g} rps: {p['violations']}/{p['requests']} late, p99 {p['p99_ms']}"
            for p in run.phases
        )
        print(f"   per phase: {per_phase}")
        late = " ".join(f"{second}:{n}" for second, n in sorted(run.late_by_second.items()))
        print(f"   late by second sent: {late or 'none'}")
        lost = "; ".join(
            f"{variant or '?'}: " + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
            for variant, kinds in sorted(run.lost_by_variant.items())
        )
        print(f"   violations by variant: {lost or 'none'}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="lstm-2365")
    parser.add_argument("--slo-ms", type=float, default=50.0)
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--min-accuracy", type=float, default=0.95)
    parser.add_argument("--variants", default="fp32,bf16,int8,torchscript")
    parser.add_argument("--validation", type=int, default=256)
    parser.add_argument("--low-rps", type=float, default=0.0, help="0: 25 %% of one fp32 instance")
    parser.add_argument(
        "--high-rps", type=float, default=0.0, help="0: 160 %% of one fp32 instance"
    )
    parser.add_argument("--low-s", type=float, default=20.0)
    parser.add_argument("--high-s", type=float, default=30.0)
    parser.add_argument("--tail-s", type=float, default=40.0)
    parser.add_argument("--max-requests", type=int, default=120_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--limit-s", type=float, default=0.5, help="per in-process limit cell (0: skip the limit)"
    )
    parser.add_argument(
        "--runs",
        default="modelless,fixed",
        help="which arms, comma-separated: modelless; fixed (every variant meeting both "
        "goals); fastest (the profiles' pick); or variant names",
    )
    parser.add_argument("--log-level", default="WARNING", help="the gateway's (to stderr)")
    parser.add_argument(
        "--config-toml",
        default="",
        help="more of the gateway's config, e.g. '[batching]\\ntarget_utilization = 0.3'",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="rounds of model-less and the best fixed variant, in alternating order",
    )
    return parser.parse_args(argv)


def extra_toml(args: argparse.Namespace) -> str:
    """The gateway's config beyond the harness's: instances are never scaled to zero
    between arms, plus `--config-toml` (its literal \\n read as line breaks)."""
    more = args.config_toml.replace("\\n", "\n")
    return f"[coldstart]\nscale_to_zero = false\n{more}\n"


@dataclass
class Session:
    """What every arm of one bench session shares: the gateway, the options, the load
    (bodies, phases, max requests, seed), the variants' measured accuracy and packages."""

    gw: Gateway
    args: argparse.Namespace
    load: tuple[list[bytes], list[tuple[float, float]], int, int]
    accuracy: dict[str, float]
    packages: dict[str, str]


def modelless_arm(session: Session, registered: bool) -> tuple[Run, list[Answer]]:
    """The model-less arm: (re-)registered unless it still is, measured once its target and
    overflow serve, then deleted (its instances must not hold cores during a fixed arm)."""
    gw, args = session.gw, session.args
    if not registered:
        register(gw, args)
    waited_s = wait_serving(gw)
    before = gw.get(f"/system/variants/{MODEL}")
    print(
        f"model-less serving after {waited_s:.1f} s: target {before['target']}, "
        f"overflow {before['overflow']}"
    )
    functions = {f"{MODEL}--{n}" for n in session.accuracy}
    run, answers = measure(
        gw, "model-less", MODEL, functions, session.load, args.slo_ms, session.accuracy, None
    )
    after = gw.get(f"/system/variants/{MODEL}")
    run.switches = after["switches"] - before["switches"]
    run.spilled = after["spilled"] - before["spilled"]
    delete(f"{gw.url}/system/models/{MODEL}")
    return run, answers


def fixed_arm(session: Session, label: str, variant: str) -> tuple[Run, list[Answer]]:
    """One variant's package deployed as an ordinary function, measured, then removed."""
    gw, args = session.gw, session.args
    name = f"fixed-{variant}"
    spec = {
        "service": name,
        "image": session.packages[variant],
        "annotations": {"com.infless.latency_target": f"{args.slo_ms:g}ms"},
        "labels": {
            "com.infless.max.batch": str(args.max_batch),
            "com.openfaas.scale.min": "1",
        },
    }
    code, answer = post(gw.url + "/system/functions", spec)
    if code >= 400:
        raise RuntimeError(f"deploy {name}: {code} {answer}")
    gw.wait_ready(name)
    measured = measure(
        gw, label, name, {name}, session.load, args.slo_ms, session.accuracy, variant
    )
    delete(f"{gw.url}/system/functions", {"functionName": name})
    time.sleep(2.0)
    return measured


def best_fixed(runs: Iterable[Run]) -> Run | None:
    """The fixed arm with the fewest violations (ties: the more accurate, then by name)."""
    fixed = [r for r in runs if r.name != "model-less"]
    return min(fixed, key=lambda r: (r.violations, -r.accuracy, r.name), default=None)


def print_verdict(modelless: Run, fixed: Run, v: dict[str, Any], why: str) -> None:
    """One line: `v`, the verdict of `modelless` against `fixed` (chosen for `why`)."""
    print(
        f"model-less vs {fixed.name} ({why}): violations {modelless.violations} vs "
        f"{fixed.violations} ({'not more' if v['no_more_violations'] else 'MORE'}), "
        f"accuracy {modelless.accuracy:.4f} vs {fixed.accuracy:.4f} ({accuracy_word(v)})"
    )


def accuracy_word(v: dict[str, Any]) -> str:
    if v["higher_accuracy"]:
        return "higher"
    return "not lower" if v["accuracy_not_lower"] else "LOWER"


def fixed_arms(
    chosen: set[str], eligible: Iterable[str], servable: Iterable[str], fastest: str
) -> list[str]:
    """The variants run as fixed arms: every one meeting both goals (`fixed`), the profiles'
    pick (`fastest`), and any variant named that meets the SLO here."""
    names = set(eligible) if "fixed" in chosen else set()
    if "fastest" in chosen:
        names.add(fastest)
    return sorted(names | (chosen & set(servable)))


def round_order(index: int, fixed: list[str], modelless: bool) -> list[str]:
    """The arms of round `index` (0-based), in order: model-less first at indexes 0, 2, …
    (rounds 1, 3, …) and last at 1, 3, …, the fixed arms rotated by one each round, so
    that no arm always runs first (just after the registration's profiling) or always on a
    gateway that has served longer."""
    shift = index % len(fixed) if fixed else 0
    order = fixed[shift:] + fixed[:shift]
    if not modelless:
        return order
    return ["modelless", *order] if index % 2 == 0 else [*order, "modelless"]


def run_rounds(
    session: Session, fixed: list[str], arms: dict[str, tuple[str, str | None]]
) -> tuple[dict[str, list[tuple[Run, list[Answer]]]], list[list[Run]]]:
    """Every round's arms (`round_order`; `arms`: each one's label and fixed variant, the
    model-less arm among them when it runs);
    each arm's results by round, and each round's figures. The model registered before
    the first round is deleted before any fixed arm runs, and registered again for a later
    round's model-less arm."""
    gw, args = session.gw, session.args
    measured: dict[str, list[tuple[Run, list[Answer]]]] = {}
    by_round: list[list[Run]] = []
    registered = True
    for index in range(args.rounds):
        this_round = []
        for arm in round_order(index, fixed, "modelless" in arms):
            if arm == "modelless":
                result = modelless_arm(session, registered)
            else:
                if registered:  # the model's instances must not hold cores meanwhile
                    delete(f"{gw.url}/system/models/{MODEL}")
                label, variant = arms[arm]
                assert variant is not None  # only the model-less arm has none
                result = fixed_arm(session, label, variant)
            registered = False
            measured.setdefault(arm, []).append(result)
            this_round.append(result[0])
        by_round.append(this_round)
        if args.rounds > 1:
            print(f"\nround {index + 1}:")
            print_runs(this_round)
    if registered:
        delete(f"{gw.url}/system/models/{MODEL}")
    return measured, by_round


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0915 - one linear script
    args = parse_args(argv)
    chosen = set(args.runs.split(","))
    limit = in_process_limit(args.image, args.limit_s)
    if limit is not None:
        print(
            f"in-process limit of {args.image} (fp32): {limit['items_per_s']:.0f} items/s "
            f"(batch {limit['batch']}, {limit['threads']} threads)"
        )
    with (
        tempfile.TemporaryDirectory(prefix="infless-modelless-") as scratch,
        gateway(Path(scratch), "", extra_toml(args), args.log_level) as gw,
    ):
        document = register(gw, args)
        variants = {v["name"]: v for v in document["variants"] if v["status"] == "ready"}
        print(f"registered {MODEL} from {args.image} in {document['generation_s']} s")
        print_variants(document)
        accuracy = {name: float(v["accuracy"]) for name, v in variants.items()}
        servable = {n: v for n, v in variants.items() if v.get("meetsSlo")}
        for name in sorted(set(variants) - set(servable)):
            print(f"{name}: {variants[name].get('sloProblem')}")
        eligible = {n: v for n, v in servable.items() if v["accuracy"] >= args.min_accuracy}
        if not eligible:
            error = (
                f"no variant meets both the {args.slo_ms:g}-ms SLO and accuracy "
                f"{args.min_accuracy} on this host: raise --slo-ms"
            )
            print(error)
            print(json.dumps({"bench": "modelless", "image": args.image, "error": error}))
            return 2
        fastest = max(
            eligible, key=lambda n: eligible[n]["config"]["qps"] / eligible[n]["config"]["cpus"]
        )
        fixed = fixed_arms(chosen, eligible, servable, fastest)
        # the load is sized by fp32's capacity (the fixed baseline); where fp32 cannot meet
        # the SLO here, by the slowest variant that can
        if "fp32" in servable:
            reference = "fp32"
        else:
            reference = min(servable, key=lambda n: float(servable[n]["config"]["qps"]))
        fp32_qps = float(servable[reference]["config"]["qps"])
        low = args.low_rps or round(0.25 * fp32_qps)
        high = args.high_rps or round(1.6 * fp32_qps)
        phases = [(low, args.low_s), (high, args.high_s), (low, args.tail_s)]
        share = f" ({high / limit['items_per_s']:.0%} of the limit)" if limit else ""
        print(
            f"load: {low:g} rps for {args.low_s:g} s, {high:g}{share} for {args.high_s:g} s, "
            f"{low:g} for {args.tail_s:g} s; SLO {args.slo_ms:g} ms; min accuracy "
            f"{args.min_accuracy}; fixed arms: {', '.join(fixed) or 'none'} (the profiles' "
            f"pick, most requests per core: {fastest}); {args.rounds} round(s)"
        )
        status = gw.get(f"/system/function/{MODEL}--fp32")
        bodies = list(make_bodies(parse_function_status(status), 512, args.seed))
        packages = {name: v["package_dir"] for name, v in variants.items()}
        session = Session(
            gw, args, (bodies, phases, args.max_requests, args.seed), accuracy, packages
        )
        arms: dict[str, tuple[str, str | None]] = {v: (f"fixed {v}", v) for v in fixed}
        if "modelless" in chosen:
            arms["modelless"] = ("model-less", None)
        measured, by_round = run_rounds(session, fixed, arms)

    runs = []
    for arm, results in measured.items():
        label, variant = arms[arm]
        runs.append(combine(label, results, phases, args.slo_ms, accuracy, variant))
    if args.rounds > 1:
        print(f"\nall {args.rounds} rounds together:")
    print_runs(runs)
    select_us = selection_cost_us()
    by_name = {r.name: r for r in runs}
    modelless = by_name.get("model-less", Run("-"))
    fp32 = by_name.get("fixed fp32", Run("-"))
    best = best_fixed(runs)
    pick = by_name.get(f"fixed {fastest}")
    figures: dict[str, Any] = {
        "bench": "modelless",
        "image": args.image,
        "slo_ms": args.slo_ms,
        "min_accuracy": args.min_accuracy,
        "phases_rps": [low, high, low],
        "in_process_limit": limit,
        "rounds": args.rounds,
        "runs": [asdict(r) for r in runs],
        "by_round": [[asdict(r) for r in one] for one in by_round],
        "violations_ratio_fp32_over_modelless": round(
            fp32.violations / max(1, modelless.violations), 2
        ),
        "core_s_ratio_fp32_over_modelless": round(fp32.core_s / max(1e-9, modelless.core_s), 2),
        "select_us_at_100_variants": select_us,
        "generation_s": document["generation_s"],
    }
    if best is not None and "model-less" in by_name:
        figures["verdict"] = verdict(modelless, best)
        figures["verdict_by_round"] = [
            verdict(round_runs["model-less"], round_best)
            for round_runs, round_best in (
                ({run.name: run for run in one}, best_fixed(one)) for one in by_round
            )
            if "model-less" in round_runs and round_best is not None
        ]
        print_verdict(modelless, best, figures["verdict"], "fewest violations of the fixed arms")
        if pick is not None and pick is not best:
            figures["verdict_vs_profiles_pick"] = against_pick = verdict(modelless, pick)
            print_verdict(modelless, pick, against_pick, "the profiles' pick")
    print(f"selection over 100 variants: {select_us} us per query")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
