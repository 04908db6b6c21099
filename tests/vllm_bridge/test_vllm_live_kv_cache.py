"""The plugin's plan follows the KV cache vLLM allocated (vllm_bridge.warmup.worker_plan.check_live_kv_cache):
a batch step hands block ids to every KV-cache group, and a group the engine config lacked failed
every batch step on an H200 (Cohere2: vLLM made four groups of its 8 full and 24 sliding layers, the
engine two). vLLM's own grouping of a layer pattern is checked in tests/integration/vllm_plugin."""

from __future__ import annotations

import logging
from types import SimpleNamespace as NS

from planner.api import expand, load_engine, load_plan
from planner.plan.steps import Prefill
from vllm_bridge.engine.from_vllm import kv_cache_mismatch, live_kv_cache, with_live_kv_cache
from vllm_bridge.releases import RELEASES
from vllm_bridge.settings import Settings
from vllm_bridge.warmup.worker import WorkerWarmup
from vllm_bridge.warmup.worker_plan import check_live_kv_cache


# vLLM's KVCacheSpec classes as the check reads them: by class name, through the class's ancestry
class KVCacheSpec:
    def __init__(self, block_size):
        self.block_size = block_size


class AttentionSpec(KVCacheSpec): pass
class FullAttentionSpec(AttentionSpec): pass
class MLAAttentionSpec(FullAttentionSpec): pass
class SlidingWindowSpec(AttentionSpec): pass
class TurboSpec(KVCacheSpec): pass  # a kind the engine schema has no name for


def runner(num_blocks, *specs):
    groups = [NS(kv_cache_spec=spec, layer_names=[]) for spec in specs]
    return NS(kv_cache_config=NS(num_blocks=num_blocks, kv_cache_groups=groups))


ENGINE = "llama-3.1-8b-fp8-h100"


def plan_and_engine():
    engine = load_engine(ENGINE)
    return engine, expand(load_plan("vllm-0.25-plugin"), engine)


def prefill_groups(expanded) -> set:
    return {len(r.block_ids) for s in expanded.steps if isinstance(s, Prefill) for r in s.requests}


def test_groups_the_engine_lacks_make_the_plan_again_for_vllms_kv_cache():
    engine, expanded = plan_and_engine()
    live = runner(5000, FullAttentionSpec(16), SlidingWindowSpec(16), SlidingWindowSpec(16))
    why, grown, remade = check_live_kv_cache(live, Settings("vllm-0.25-plugin"), engine, expanded)
    assert why == ("vLLM's KV cache has 3 groups (full_attention 16, sliding_window 16, sliding_window 16), the "
                   "engine config 1 (full_attention 16); the plan is made again for vLLM's KV cache")
    assert prefill_groups(expanded) == {1} and prefill_groups(remade) == {3}
    assert grown.facts.kv_cache.num_blocks == 5000
    top = max(b for s in remade.steps if isinstance(s, Prefill) for r in s.requests for g in r.block_ids for b in g)
    assert top < 5000, "every block id is one vLLM allocated"


def test_a_block_count_alone_remakes_the_plan_without_a_line():
    engine, expanded = plan_and_engine()
    why, grown, remade = check_live_kv_cache(runner(77, MLAAttentionSpec(16)), Settings("vllm-0.25-plugin"),
                                             engine, expanded)
    assert why is None and grown.facts.kv_cache.num_blocks == 77 and remade is not expanded
    same = runner(engine.facts.kv_cache.num_blocks, FullAttentionSpec(16))
    assert check_live_kv_cache(same, Settings("vllm-0.25-plugin"), engine, expanded) == (None, engine, expanded)


def test_groups_in_another_order_are_the_same_groups():
    live = live_kv_cache(runner(10, SlidingWindowSpec(16), FullAttentionSpec(16)))
    assert live["groups"] == [{"block_size": 16, "kind": "sliding_window"}, {"block_size": 16, "kind": "full_attention"}]
    two = with_live_kv_cache(load_engine(ENGINE), {"num_blocks": 10, "groups": list(reversed(live["groups"]))})
    assert kv_cache_mismatch(two.facts, live) is None  # vLLM orders kinds by their first layer
    assert kv_cache_mismatch(two.facts, {**live, "groups": live["groups"] + live["groups"][:1]}) is not None


def test_a_kv_cache_it_cannot_read_leaves_the_plan_as_it_was():
    engine, expanded = plan_and_engine()
    why, same_engine, same_plan = check_live_kv_cache(runner(10, TurboSpec(16)), Settings("vllm-0.25-plugin"),
                                                      engine, expanded)
    assert why == "vLLM's KV cache could not be read (ValueError: vLLM's KV-cache group spec TurboSpec has no engine kind)"
    assert (same_engine, same_plan) == (engine, expanded)
    assert check_live_kv_cache(NS(), Settings("vllm-0.25-plugin"), engine, expanded) == (None, engine, expanded)


def test_the_worker_checks_before_the_plan_runs_and_says_a_difference_once(caplog, monkeypatch):
    engine, expanded = plan_and_engine()
    worker = NS(vllm_config=None, rank=0, device="cpu",
                model_runner=runner(5000, FullAttentionSpec(16), SlidingWindowSpec(16)))
    state = WorkerWarmup(worker, RELEASES["0.25.0"], Settings("vllm-0.25-plugin"), engine, expanded)
    seen = []
    monkeypatch.setattr(state, "_run_vllm_method", lambda original: seen.append(prefill_groups(state.expanded)))
    with caplog.at_level(logging.WARNING, logger="vllm.warmup_planner"):
        state.warm_up(lambda: "ready")
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("warmup-planner: rank 0: vLLM's KV cache has 2 groups")
    assert seen == [{2}], "the plan was made again before vLLM's method (and the plan in it) ran"
    assert state.engine.facts.kv_cache.num_blocks == 5000
