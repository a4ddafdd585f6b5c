"""The `vllm serve` command the collection renders, through vLLM 0.25.1's own code.

probe_vllm_args.py (run in the conformance venv) builds `vllm serve`'s parser as
vLLM's CLI does, parses the rendered argv, validates it, makes the AsyncEngineArgs
and calls create_engine_config, which builds the ModelConfig, ParallelConfig,
CacheConfig, SchedulerConfig and the SpeculativeConfig (DFlash, its draft's
ModelConfig, k).  What is not real, because there is no GPU and no checkpoint:
  * the model paths point at tests/conformance/models/*/config.json, stand-ins
    shaped like the Laguna-S 2.1 FP8 target and the W4A16 DFlash draft (no weights);
  * vLLM's CUDA platform answers device queries as a GB10 (sm_121, 1 GPU);
  * the CUDA extension modules are empty, and the model classes are rebuilt from
    their source (bases, class attributes, method signatures) for vLLM's
    interface inspection, since their modules import CUDA kernels.
"""

import os

import pytest

from _conformance import MODELS
from helpers import standin
from helpers.constants import MAX_MODEL_LEN, SERVED_MODEL


def _ok(case):
    assert "error" not in case, "%s\n%s" % (case.get("error"), case.get("traceback"))


@pytest.fixture(scope="module")
def probe(vllm_probe):
    return vllm_probe


def test_vllm_version_is_the_pinned_one(probe):
    assert probe["cases"]["rendered"]["vllm_version"] == "0.25.1"


def test_rendered_argv_goes_through_parse_engine_args_and_engine_config(probe):
    case = probe["cases"]["rendered"]
    _ok(case)
    assert case["stages"] == ["parse", "engine", "config", "metrics"]
    assert case["not_exact_flags"] == [], "flags vLLM only takes as abbreviations"


def test_parsed_values_are_the_recipes(probe, head):
    args = probe["cases"]["rendered"]["args"]
    vars_ = head["vars"]
    assert args["model"] == vars_["laguna_model_path"]
    assert args["served_model_name"] == [SERVED_MODEL]
    assert args["distributed_executor_backend"] == "ray"
    assert args["tensor_parallel_size"] == 2
    assert args["enforce_eager"] is True
    assert args["max_model_len"] == MAX_MODEL_LEN
    assert args["gpu_memory_utilization"] == 0.85
    assert args["kv_cache_memory_bytes"] == 5368709120
    assert args["max_num_seqs"] == 2 and args["max_num_batched_tokens"] == 8192
    assert (args["host"], args["port"]) == ("0.0.0.0", 8000)
    assert args["speculative_config"] == {"method": "dflash", "model": vars_["laguna_draft_path"],
                                          "num_speculative_tokens": 6}


def test_engine_config_has_the_dflash_speculative_config(probe):
    config = probe["cases"]["rendered"]["config"]
    assert config["model_architectures"] == ["LagunaForCausalLM"]
    assert config["quantization"] == "fp8"
    assert config["tensor_parallel_size"] == 2
    assert config["distributed_executor_backend"] == "ray"
    assert config["enforce_eager"] is True and config["max_model_len"] == MAX_MODEL_LEN
    assert config["kv_cache_memory_bytes"] == 5368709120
    assert config["served_model_name"] == SERVED_MODEL
    spec = config["speculative"]
    assert spec["method"] == "dflash" and spec["num_speculative_tokens"] == 6
    assert spec["model"] == os.path.join(MODELS, "Laguna-S-2.1-DFlash-W4A16")
    assert spec["draft_architectures"] == ["DFlashLagunaForCausalLM"]
    assert spec["draft_quantization"] == "compressed-tensors"
    assert spec["parallel_drafting"] is True


def test_what_was_stubbed_is_reported(probe):
    assert probe["platform"]["capability"] == [12, 1] and probe["platform"]["name"] == "NVIDIA GB10"
    assert sorted(c.split("(")[0] for c in probe["rebuilt_model_classes"]) == [
        "vllm.model_executor.models.laguna.LagunaForCausalLM",
        "vllm.model_executor.models.laguna_dflash.DFlashLagunaForCausalLM"]


def test_a_misspelt_flag_is_rejected_by_the_parser(probe):
    case = probe["cases"]["bad_flag"]
    assert case["stages"] == [] and "parser rejected" in case["error"]


def test_a_misspelt_speculative_key_is_rejected(probe):
    case = probe["cases"]["bad_spec_key"]
    assert "config" not in case["stages"]
    assert "num_speculative_token" in case["error"]


def test_an_abbreviated_flag_is_reported(probe):
    assert probe["cases"]["prefix_flag"]["not_exact_flags"] == ["--kv-cache-memory-byte"]


def test_standin_accepts_only_real_vllm_serve_flags(probe):
    """The stand-in `vllm serve` (molecule, integration) takes no flag vLLM 0.25.1 lacks."""
    import argparse
    cli, = standin.modules("vllm.entrypoints.cli")
    serve = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["serve"]
    ours = {o for o in serve._option_string_actions if o.startswith("--")} - {"--help"}
    real = set(probe["cases"]["rendered"]["serve_options"])
    assert len(real) > 100
    assert ours - real == set()
