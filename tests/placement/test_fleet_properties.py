"""A fleet updated step by step always holds the same columns as one built from scratch."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tests.placement.support import (
    EXTRA_NAMES,
    HOST_IDS,
    LABEL_KEYS,
    LABEL_VALUES,
    NOW,
    extra_maps,
    host_states,
)
from vmsched_placement import Demand, Fleet, HostState, Weights
from vmsched_placement.filters.offline import Available
from vmsched_placement.fleet import DerivedColumn
from vmsched_placement.strategies.scoring import WeightedLoad, WeightedShares

demands = st.builds(Demand, st.integers(0, 4), st.integers(0, 2048), st.integers(0, 20), st.integers(0, 1), extra_maps)


class FleetMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.fleet = Fleet.from_hosts([])
        self.expected: dict[str, HostState] = {}
        self.watched_labels: set[tuple[str, str]] = set()
        self.watched_extras: set[str] = set()
        self.derived: list[DerivedColumn[Any]] = []

    @rule(state=host_states())
    def upsert(self, state: HostState) -> None:
        self.fleet.upsert(state)
        self.expected[state.id] = state

    @rule(states=st.lists(host_states(), max_size=8))
    def upsert_many(self, states: list[HostState]) -> None:
        self.fleet.upsert_many(states)
        self.expected.update((s.id, s) for s in states)

    @rule(host_id=st.sampled_from(HOST_IDS))
    def remove(self, host_id: str) -> None:
        self.fleet.remove(host_id)
        self.expected.pop(host_id, None)

    @rule(host_id=st.sampled_from(HOST_IDS), demand=demands)
    def allocate(self, host_id: str, demand: Demand) -> None:
        self.fleet.allocate(host_id, demand)
        if host_id in self.expected:
            h = self.expected[host_id]
            self.expected[host_id] = replace(h, allocated=h.allocated.plus(demand), vm_count=h.vm_count + 1)

    @rule(host_id=st.sampled_from(HOST_IDS), demand=demands)
    def release(self, host_id: str, demand: Demand) -> None:
        self.fleet.release(host_id, demand)
        if host_id in self.expected:
            h = self.expected[host_id]
            cpu, memory_mb, disk_gb, gpu = (
                max(0, a - b) for a, b in zip(h.allocated.as_tuple(), demand.as_tuple(), strict=True)
            )
            extra = dict(h.allocated.extra)
            for name, count in demand.extra:
                extra[name] = max(0, extra.get(name, 0) - count)
            left = Demand(cpu, memory_mb, disk_gb, gpu, tuple(sorted((n, c) for n, c in extra.items() if c)))
            self.expected[host_id] = replace(h, allocated=left, vm_count=max(0, h.vm_count - 1))

    @rule(key=st.sampled_from(LABEL_KEYS), value=st.sampled_from(LABEL_VALUES))
    def watch_label(self, key: str, value: str) -> None:
        """Use a label mask, so that the fleet has to keep it current from now on."""
        self.fleet.columns.label_mask(key, value)
        self.watched_labels.add((key, value))

    @rule(name=st.sampled_from(EXTRA_NAMES))
    def watch_extra(self, name: str) -> None:
        """Ask for an extra resource's column, so that the fleet has to keep it current from now on."""
        self.fleet.columns.extra_free(name)
        self.watched_extras.add(name)

    @rule(weights=st.builds(Weights, st.sampled_from([0.0, 0.4, 1.0]), st.sampled_from([0.4, 0.3]), st.just(0.2)))
    def watch_scores(self, weights: Weights) -> None:
        """Rank by a kept score column, so that the fleet keeps it current (or drops it) from now on."""
        for spec in (WeightedShares(weights), WeightedLoad(weights)):
            self.fleet.columns.derived(spec)
            self.derived = [kept for kept in self.derived if type(kept) is not type(spec)] + [spec]

    @rule(now=st.floats(NOW - 5, NOW + 60), timeout=st.sampled_from([15.0, 30.0]))
    def watch_availability(self, now: float, timeout: float) -> None:
        spec = Available(now, timeout)
        self.fleet.columns.derived(spec)
        self.derived = [kept for kept in self.derived if type(kept) is not Available] + [spec]

    @invariant()
    def columns_match_a_fleet_built_from_scratch(self) -> None:
        fresh = Fleet.from_hosts(self.expected.values()).columns
        columns = self.fleet.columns
        assert columns.ids == sorted(self.expected)
        assert columns.hosts == [self.expected[i] for i in columns.ids]
        for name in ("online", "last_heartbeat", "paused", "effective", "allocated", "free", "divisor", "utilisation"):
            assert np.array_equal(getattr(columns, name), getattr(fresh, name)), name
        for key, value in self.watched_labels:
            assert np.array_equal(columns.label_mask(key, value), fresh.label_mask(key, value)), (key, value)
        for name in self.watched_extras:
            assert np.array_equal(columns.extra_free(name), fresh.extra_free(name)), name
        for spec in self.derived:
            # Kept row by row, yet bit-identical to the column computed whole.
            assert np.array_equal(columns.derived(spec), spec.compute(fresh)), spec
        assert len(columns.scratch.eligible) == len(self.expected)


TestFleetUpdates = FleetMachine.TestCase
TestFleetUpdates.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
