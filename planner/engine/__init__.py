"""The engine model: what the serving engine is, as one rank of it sees the warmup.

    config.py        an engine config: load, validate, apply defaults (Engine, engine_from_document)
    facts.py         EngineFacts, the typed record every other module reads the engine through
    names.py         the names plans use for engine facts (vLLM's vocabulary), each declared once
    queries.py       the questions the stages and lints ask of EngineFacts (block-FP8 linears, MoE weights)
    hf/              an engine config from a Hugging Face config.json and vLLM's flags (one module per concern)
    releases.py      one row per supported vLLM release: its plan, its rules, what its setup installs
    vllm_choices.py  the rules a release row names: model runner, linear kernel, sampler

Only config.py and facts.py hold the engine dict (tests/test_layers.py); this package imports
the planner's base modules and nothing of the plan machinery, the tables or the review above it.
"""
