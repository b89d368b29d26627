"""Cold-start policies behind one interface: fixed keep-alive, HHP and LSTH.

Owns: the `Windows` value, the `ColdStartPolicy` protocol, each policy's config and
immutable per-function state, and `build_policy` (name + parameters -> policy).

Pure: no I/O, no clock. Time is always an argument (`arrival_s`, `now_s`, seconds on any
monotonic scale); minutes for the sliding windows are `floor(t / 60)` of that scale.

The protocol, per function:
    state = policy.initial_state()
    on each request arrival:   state = policy.observe(state, arrival_s, busy=...)  # the IT
    when an execution ends:    windows, state = policy.decide(state, now_s)
The idle time recorded at an arrival is `max(0, arrival_s − end of the previous execution)`,
or 0 when `busy` (another execution of the function is still in flight). Call `decide` when
an execution ends; the windows of the last call made when nothing is in flight count.
`windows.prewarm_s == 0` means "do not unload": keep the instance for `keepalive_s` after the
execution; otherwise unload now, load again at `now_s + prewarm_s`, keep it `keepalive_s`.

ARIMA substitute (HHP's branch when out-of-bounds ITs dominate): the forecast of the next
idle time is the mean of the out-of-bounds ITs seen (the one-step forecast of a constant-mean
ARIMA(0,0,0) model on the long-IT series). The branch fires only when most ITs exceed the
range (4 h), i.e. for functions with a handful of long gaps a day, where higher-order ARIMA
fits are not identifiable; the spec's margins (±15 %) are applied unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from infless.coldstart.config import (
    FixedConfig,
    HistogramConfig,
    LsthConfig,
    policy_settings,
)
from infless.coldstart.histogram import (
    Histogram,
    bin_of,
    hhp_windows,
    lsth_blend,
)

MINUTE_S = 60.0


@dataclass(frozen=True, slots=True)
class Windows:
    """What to do after an execution: unload for `prewarm_s`, then stay loaded `keepalive_s`."""

    prewarm_s: float
    keepalive_s: float

    def __post_init__(self) -> None:
        if self.prewarm_s < 0 or self.keepalive_s < 0:
            raise ValueError(
                f"prewarm_s={self.prewarm_s}, keepalive_s={self.keepalive_s}: must be >= 0"
            )

    @property
    def alive_until_s(self) -> float:
        """Seconds after the execution at which the instance is released."""
        return self.prewarm_s + self.keepalive_s


StateT = TypeVar("StateT")


class ColdStartPolicy(Protocol[StateT]):
    """A pure cold-start policy: immutable state in, windows and new state out."""

    @property
    def name(self) -> str: ...

    def initial_state(self) -> StateT: ...

    def observe(self, state: StateT, arrival_s: float, *, busy: bool = False) -> StateT: ...

    def decide(self, state: StateT, now_s: float) -> tuple[Windows, StateT]: ...


def _idle_s(last_end_s: float | None, arrival_s: float, busy: bool) -> float | None:
    if last_end_s is None:
        return None
    return 0.0 if busy else max(0.0, arrival_s - last_end_s)


# --------------------------------------------------------------------------- fixed


@dataclass(frozen=True, slots=True)
class FixedState:
    last_end_s: float | None = None


@dataclass(frozen=True, slots=True)
class FixedPolicy:
    """Keep every instance `keepalive_s` after its last execution; never pre-warm."""

    config: FixedConfig = field(default_factory=FixedConfig)

    @property
    def name(self) -> str:
        return "fixed"

    def initial_state(self) -> FixedState:
        return FixedState()

    def observe(self, state: FixedState, arrival_s: float, *, busy: bool = False) -> FixedState:
        del arrival_s, busy
        return state

    def decide(self, state: FixedState, now_s: float) -> tuple[Windows, FixedState]:
        del state
        return Windows(0.0, self.config.keepalive_s), FixedState(last_end_s=now_s)


# --------------------------------------------------------------------------- HHP


@dataclass(frozen=True, slots=True)
class HhpState:
    histogram: Histogram
    last_end_s: float | None = None


@dataclass(frozen=True, slots=True)
class HhpPolicy:
    """Hybrid Histogram Policy: one cumulative IT histogram over the function's life."""

    config: HistogramConfig = field(default_factory=HistogramConfig)

    @property
    def name(self) -> str:
        return "hhp"

    def initial_state(self) -> HhpState:
        return HhpState(histogram=Histogram.empty(self.config.range_bins))

    def observe(self, state: HhpState, arrival_s: float, *, busy: bool = False) -> HhpState:
        it_s = _idle_s(state.last_end_s, arrival_s, busy)
        if it_s is None:
            return state
        return replace(state, histogram=state.histogram.add(it_s, self.config.bin_s))

    def decide(self, state: HhpState, now_s: float) -> tuple[Windows, HhpState]:
        cfg = self.config
        pw, ka, _ = hhp_windows(state.histogram.stats(cfg.head_q, cfg.tail_q), cfg)
        return Windows(float(pw[0]), float(ka[0])), replace(state, last_end_s=now_s)


# --------------------------------------------------------------------------- LSTH


# One logged observation: (minute observed, idle time s, times in the long histogram,
# times in the short one). In-range ITs are stored at their bin start and merged per
# (minute, bin); out-of-bounds ITs are stored one by one.
_Entry = tuple[int, float, int, int]


@dataclass(frozen=True, slots=True)
class LsthState:
    long: Histogram
    short: Histogram
    log: tuple[_Entry, ...] = ()
    short_start: int = 0  # index in `log` of the first entry inside the short window
    minute: int | None = None  # the minute the windows were last advanced to
    last_end_s: float | None = None
    sampled_minute: int | None = None  # the minute of the short histogram's last sample


@dataclass(frozen=True, slots=True)
class LsthPolicy:
    """Long-Short Term Histogram policy with time-bucketed (1-minute) sliding windows.

    The long histogram holds ITs observed in minutes (M − long_window_min, M], the short one
    those in (M − short_window_min, M], M = floor(now / 60). With `short_per_minute`, the
    short histogram takes only the first arrival of each minute (see `LsthConfig`).
    """

    config: LsthConfig = field(default_factory=LsthConfig)

    @property
    def name(self) -> str:
        return "lsth"

    def initial_state(self) -> LsthState:
        empty = Histogram.empty(self.config.histogram.range_bins)
        return LsthState(long=empty, short=empty)

    def observe(self, state: LsthState, arrival_s: float, *, busy: bool = False) -> LsthState:
        it_s = _idle_s(state.last_end_s, arrival_s, busy)
        minute = math.floor(arrival_s / MINUTE_S)
        if it_s is None:  # the first arrival: no idle time, but its minute is taken
            return replace(state, sampled_minute=minute)
        if state.minute is not None:
            minute = max(minute, state.minute)  # keep the log ordered if time steps back
        state = self._advance(state, minute)
        sampled = not self.config.short_per_minute or state.sampled_minute != minute
        short_times = 1 if sampled else 0
        hcfg = self.config.histogram
        b = bin_of(it_s, hcfg.bin_s)
        log = list(state.log)
        merged = False
        if b < hcfg.range_bins:
            it_s = b * hcfg.bin_s
            i = len(log) - 1
            while not merged and i >= state.short_start and log[i][0] == minute:
                _, logged_s, long_times, logged_short = log[i]
                if logged_s == it_s:
                    log[i] = (minute, it_s, long_times + 1, logged_short + short_times)
                    merged = True
                i -= 1
        if not merged:
            log.append((minute, it_s, 1, short_times))
        return replace(
            state,
            log=tuple(log),
            long=state.long.add(it_s, hcfg.bin_s),
            short=state.short.add(it_s, hcfg.bin_s, short_times),
            sampled_minute=minute if sampled else state.sampled_minute,
        )

    def decide(self, state: LsthState, now_s: float) -> tuple[Windows, LsthState]:
        cfg = self.config
        hcfg = cfg.histogram
        state = self._advance(state, math.floor(now_s / MINUTE_S))
        pw, ka, _ = lsth_blend(
            state.long.stats(hcfg.head_q, hcfg.tail_q),
            state.short.stats(hcfg.head_q, hcfg.tail_q),
            hcfg,
            gamma=cfg.gamma,
            short_min_its=cfg.short_min_its,
        )
        return Windows(float(pw[0]), float(ka[0])), replace(state, last_end_s=now_s)

    def _advance(self, state: LsthState, minute: int) -> LsthState:
        """Expire observations that fell out of the long and short windows at `minute`."""
        if state.minute is not None and minute <= state.minute:
            return state
        bin_s = self.config.histogram.bin_s
        long, short, log, start = state.long, state.short, state.log, state.short_start
        long_cut = minute - self.config.long_window_min
        short_cut = minute - self.config.short_window_min
        dropped = 0
        while dropped < len(log) and log[dropped][0] <= long_cut:
            _, it_s, long_times, short_times = log[dropped]
            long = long.add(it_s, bin_s, -long_times)
            if dropped >= start:
                short = short.add(it_s, bin_s, -short_times)
            dropped += 1
        start = max(start, dropped)
        while start < len(log) and log[start][0] <= short_cut:
            _, it_s, _, short_times = log[start]
            short = short.add(it_s, bin_s, -short_times)
            start += 1
        return replace(
            state,
            long=long,
            short=short,
            log=log[dropped:],
            short_start=start - dropped,
            minute=minute,
        )


# --------------------------------------------------------------------------- factory


def build_policy(name: str, params: Mapping[str, Any] | None = None) -> ColdStartPolicy[Any]:
    """Build a policy by name from its config parameters (see `config.policy_settings`)."""
    settings = policy_settings(name, params)
    if isinstance(settings, FixedConfig):
        return FixedPolicy(settings)
    if isinstance(settings, LsthConfig):
        return LsthPolicy(settings)
    return HhpPolicy(settings)
