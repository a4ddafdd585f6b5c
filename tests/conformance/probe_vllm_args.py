"""Run inside the conformance venv: check a rendered `vllm serve` argv with vLLM's own code.

stdin: JSON {"cases": {name: {"argv": [...the rendered command, argv[0] being .../bin/vllm...],
                               "paths": {"<path in argv>": "<local stand-in dir>", ...}}}}
stdout (last line): JSON {"platform": ..., "rebuilt_model_classes": [...],
                          "cases": {name: {"stages": [...], "args": ..., "config": ..., "error": ...}}}

Stages, each with vLLM 0.25.1's code:
  parse     - the `vllm` top-level parser with the `serve` subcommand registered
              exactly as vllm.entrypoints.cli.main does (ServeSubcommand.subparser_init
              -> make_arg_parser), then ServeSubcommand.validate;
  engine    - AsyncEngineArgs.from_cli_args, as the API server does;
  metrics   - (with "metrics_drafts": [accepted per draft, ...]) vLLM's
              PrometheusStatLogger for that config, fed those drafts; returns
              the /metrics text and the metric families (name, type, labels);
  config    - EngineArgs.create_engine_config (ModelConfig from the target's
              config.json, SpeculativeConfig with the DFlash draft's ModelConfig,
              parallel / cache / scheduler configs).  Model paths in the argv do
              not exist here, so they are mapped to small stand-in directories
              holding only a config.json (no weights, no tokenizer files).
"""

import json
import os
import sys
import traceback
import types

import _probe

# What is NOT real here (no GPU, CPU torch): vLLM's compiled CUDA ops cannot load
# (they need libcuda), so an empty module stands in for them, and the device
# queries of vLLM's own CUDA platform class are answered as one GB10 would answer
# them (sm_121, 1 GPU per node, 121 GiB unified memory).  Everything else is
# vLLM's code.
GB10 = {"capability": (12, 1), "name": "NVIDIA GB10", "memory": 121 * 1024 ** 3}


# Compiled CUDA extensions (need libcuda / a CUDA torch): empty modules whose
# every attribute is a kernel that raises if called.  Config code imports them
# but must not call them; if it does, the probe says so.
CUDA_EXTENSIONS = ("vllm._C_stable_libtorch", "vllm.vllm_flash_attn")


class _Kernel:
    def __init__(self, name):
        self.name = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError("CUDA kernel %s called during config building" % self.name)


def _stub_extension(name):
    module = types.ModuleType(name)
    module.__getattr__ = lambda attr: _Kernel("%s.%s" % (name, attr)) if not attr.startswith("__") else None
    sys.modules.setdefault(name, module)


# Capability queries that vLLM's CUDA ops answer at import time; answered for
# sm_121 the way the CUTLASS kernels built into the 0.25.1 wheel answer (FP8
# scaled-mm from sm_89 on, block-FP8 from sm_90, FP4 from sm_100).  They only
# steer which GEMM kernel is picked later, not whether a config is valid.  Each
# is a torch op in the `_C` namespace.
CAPABILITY_OPS = {
    "cutlass_scaled_mm_supports_fp8": lambda capability: capability >= 89,
    "cutlass_scaled_mm_supports_block_fp8": lambda capability: capability >= 90,
    "cutlass_scaled_mm_supports_fp4": lambda capability: capability >= 100,
}


def _define_capability_ops():
    import torch
    library = torch.library.Library("_C", "FRAGMENT")
    for name, answer in CAPABILITY_OPS.items():
        if hasattr(torch.ops._C, name):
            continue
        library.define("%s(int cuda_device_capability) -> bool" % name)
        library.impl(name, answer, "CompositeExplicitAutograd")
    return library


def use_gb10_platform():
    for name in CUDA_EXTENSIONS:
        _stub_extension(name)
    GB10["_library"] = _define_capability_ops()
    import vllm.platforms
    from vllm.platforms import cuda
    from vllm.platforms.interface import DeviceCapability

    class GB10Platform(cuda.NonNvmlCudaPlatform):
        @classmethod
        def get_device_capability(cls, device_id=0):
            return DeviceCapability(*GB10["capability"])

        @classmethod
        def get_device_name(cls, device_id=0):
            return GB10["name"]

        @classmethod
        def get_device_total_memory(cls, device_id=0):
            return GB10["memory"]

        @classmethod
        def device_count(cls):
            return 1

        @classmethod
        def is_fully_connected(cls, physical_device_ids):
            return False

    platform = GB10Platform()
    # Tell the truth about the shim in the report.
    GB10["platform_class"] = "%s(%s)" % (GB10Platform.__name__, cuda.NonNvmlCudaPlatform.__name__)
    vllm.platforms.current_platform = platform
    vllm.platforms._current_platform = platform
    return platform


def rebuild_model_class(module_name, class_name):
    """The model class as declared in vLLM's source, without its CUDA-only imports.

    vLLM inspects a model class (in a subprocess) by importing its module, and the
    Laguna modules import CUDA kernels (flash-attn, custom ops) at import time.  So
    the class is rebuilt from its source: the same name, the same base classes (the
    real interface mixins from vllm.model_executor.models.interfaces and
    torch.nn.Module), its literal class attributes, and its methods with the same
    signatures and bodies replaced.  vLLM's own _ModelInfo.from_model_cls then
    reads the interfaces (supports_pp, is_hybrid, attention type, ...) off it.
    """
    import ast
    import importlib.util

    import torch.nn
    from vllm.model_executor.models import interfaces

    path = importlib.util.find_spec(module_name).origin
    tree = ast.parse(open(path).read(), path)
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    body = []
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            item.decorator_list = [d for d in item.decorator_list
                                   if isinstance(d, ast.Name) and d.id in ("classmethod", "staticmethod")]
            for arg in item.args.args + item.args.kwonlyargs + item.args.posonlyargs:
                arg.annotation = None
            for arg in (item.args.vararg, item.args.kwarg):
                if arg is not None:
                    arg.annotation = None
            item.returns = None
            item.args.defaults = [ast.Constant(None) for _default in item.args.defaults]
            item.args.kw_defaults = [None if d is None else ast.Constant(None) for d in item.args.kw_defaults]
            item.body = [ast.Raise(ast.Call(ast.Name("NotImplementedError", ast.Load()), [], []), None)]
            body.append(item)
        elif isinstance(item, (ast.Assign, ast.AnnAssign)) and item.value is not None:
            try:
                ast.literal_eval(item.value)
            except ValueError:
                continue
            body.append(item)
    node.body = body or [ast.Pass()]
    node.decorator_list = []
    namespace = {name: getattr(interfaces, name) for name in dir(interfaces)}
    namespace["nn"] = torch.nn
    module = ast.Module([node], [])
    exec(compile(ast.fix_missing_locations(module), path, "exec"), namespace)
    cls = namespace[class_name]
    cls.__module__ = module_name
    return cls


def inspect_models_in_process(report):
    """Let vLLM's registry inspect the rebuilt classes in this process."""
    from vllm.model_executor.models import registry

    rebuilt = {}
    original = registry._LazyRegisteredModel.load_model_cls

    def load_model_cls(self):
        key = (self.module_name, self.class_name)
        if key not in rebuilt:
            rebuilt[key] = rebuild_model_class(*key)
            report.setdefault("rebuilt_model_classes", []).append(
                "%s.%s(%s)" % (key[0], key[1], ", ".join(b.__name__ for b in rebuilt[key].__bases__)))
        return rebuilt[key]

    registry._LazyRegisteredModel.load_model_cls = load_model_cls
    registry._run_in_subprocess = lambda fn: fn()
    # No on-disk model-info cache: its writer imports the CUDA model loader.
    registry._LazyRegisteredModel._save_modelinfo_to_cache = lambda self, mi, module_hash: None
    registry._LazyRegisteredModel._load_modelinfo_from_cache = lambda self, module_hash: None
    return original


def check(argv, paths, drafts=None):
    """One rendered argv through vLLM's code; a report of how far it got."""
    report = {"stages": []}
    try:
        import vllm
        from vllm.entrypoints.cli import serve as serve_cli
        from vllm.utils.argparse_utils import FlexibleArgumentParser
        report["vllm_version"] = vllm.__version__

        if os.path.basename(argv[0]) != "vllm" or argv[1] != "serve":
            raise ValueError("not a `vllm serve` command: %r" % argv[:2])
        top = FlexibleArgumentParser(description="vLLM CLI")
        subparsers = top.add_subparsers(required=False, dest="subparser")
        command = serve_cli.ServeSubcommand()
        command.subparser_init(subparsers).set_defaults(dispatch_function=command.cmd)
        serve_parser = subparsers.choices["serve"]
        report["serve_options"] = sorted(o for o in serve_parser._option_string_actions if o.startswith("--"))
        # argparse also takes unambiguous prefixes: list flags that are not spelt out.
        report["not_exact_flags"] = [
            a.split("=")[0] for a in argv[2:]
            if a.startswith("--") and a.split("=")[0] not in serve_parser._option_string_actions]
        try:
            args = top.parse_args(argv[1:])
        except SystemExit as exc:
            raise ValueError("vllm serve's parser rejected the arguments (exit %s)" % exc.code)
        command.validate(args)
        if getattr(args, "model_tag", None) is not None:
            args.model = args.model_tag
        report["stages"].append("parse")
        keys = ("model", "served_model_name", "host", "port", "distributed_executor_backend",
                "tensor_parallel_size", "pipeline_parallel_size", "enforce_eager",
                "max_model_len", "gpu_memory_utilization", "kv_cache_memory_bytes",
                "max_num_seqs", "max_num_batched_tokens", "speculative_config",
                "trust_remote_code")
        report["args"] = json.loads(json.dumps({key: getattr(args, key, None) for key in keys}, default=str))

        # Point the model paths at local stand-ins (config.json only): the
        # EngineArgs would otherwise look a missing path up on the Hub.
        args.model = paths.get(args.model, args.model)
        args.model_tag = args.model
        if isinstance(args.speculative_config, dict) and "model" in args.speculative_config:
            args.speculative_config = dict(args.speculative_config,
                                           model=paths.get(args.speculative_config["model"],
                                                           args.speculative_config["model"]))
        from vllm.engine.arg_utils import AsyncEngineArgs
        engine_args = AsyncEngineArgs.from_cli_args(args)
        report["stages"].append("engine")

        from vllm.usage.usage_lib import UsageContext
        config = engine_args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
        report["stages"].append("config")
        spec = config.speculative_config
        report["config"] = {
            "model_architectures": list(config.model_config.architectures),
            "max_model_len": config.model_config.max_model_len,
            "enforce_eager": config.model_config.enforce_eager,
            "served_model_name": config.model_config.served_model_name,
            "quantization": config.model_config.quantization,
            "tensor_parallel_size": config.parallel_config.tensor_parallel_size,
            "distributed_executor_backend": str(config.parallel_config.distributed_executor_backend),
            "kv_cache_memory_bytes": config.cache_config.kv_cache_memory_bytes,
            "gpu_memory_utilization": config.cache_config.gpu_memory_utilization,
            "max_num_seqs": config.scheduler_config.max_num_seqs,
            "max_num_batched_tokens": config.scheduler_config.max_num_batched_tokens,
            "speculative": None if spec is None else {
                "method": spec.method,
                "num_speculative_tokens": spec.num_speculative_tokens,
                "model": spec.model,
                "draft_architectures": list(spec.draft_model_config.architectures),
                "draft_quantization": spec.draft_model_config.quantization,
                "draft_tensor_parallel_size": spec.draft_tensor_parallel_size,
                "parallel_drafting": getattr(spec, "parallel_drafting", None),
            },
        }
        if drafts is not None:
            report["metrics"] = expose_metrics(config, drafts)
            report["stages"].append("metrics")
    except BaseException as exc:  # report how far it got, and why not further
        report["error"] = "%s: %s" % (type(exc).__name__, exc)
        report["traceback"] = traceback.format_exc()[-6000:]
    return report


def expose_metrics(config, drafts):
    """/metrics as vLLM writes it for this config, after the given drafts.

    vLLM's own PrometheusStatLogger (the API server's) registers its metrics for
    the VllmConfig; the drafts go through SpecDecodingStats.observe_draft and
    SpecDecodingProm.observe, as the scheduler's stats do; the text is
    prometheus_client's exposition of the registry, as /metrics serves it, and
    "samples" is that text as prometheus_client's parser reads it.
    """
    import prometheus_client
    from prometheus_client.parser import text_string_to_metric_families
    from vllm.v1.metrics.loggers import PrometheusStatLogger
    from vllm.v1.spec_decode.metrics import SpecDecodingStats

    logger = PrometheusStatLogger(config, engine_indexes=[0])
    k = config.speculative_config.num_speculative_tokens
    stats = SpecDecodingStats.new(k)
    for accepted in drafts:
        stats.observe_draft(num_draft_tokens=k, num_accepted_tokens=accepted)
    logger.spec_decoding_prom.observe(stats, engine_idx=0)
    families = {}
    for family in prometheus_client.REGISTRY.collect():
        if not family.name.startswith("vllm:"):
            continue
        families[family.name] = {
            "type": family.type,
            "samples": sorted({sample.name for sample in family.samples}),
            "labels": sorted({name for sample in family.samples for name in sample.labels}),
        }
    text = prometheus_client.generate_latest().decode()
    # prometheus_client's own reading of that text: what the collection's reader must find.
    parsed = [[sample.name, sample.labels, sample.value]
              for family in text_string_to_metric_families(text) for sample in family.samples]
    return {"text": text, "families": families, "samples": parsed,
            "observed": {"num_drafts": stats.num_drafts, "num_draft_tokens": stats.num_draft_tokens,
                         "num_accepted_tokens": stats.num_accepted_tokens,
                         "num_accepted_tokens_per_pos": list(stats.num_accepted_tokens_per_pos)}}


def report(request):
    result = {}
    try:
        import vllm  # noqa: F401
        use_gb10_platform()
        inspect_models_in_process(result)
        result["platform"] = {k: v for k, v in GB10.items() if not k.startswith("_")}
    except BaseException as exc:
        result["setup_error"] = _probe.error(exc)
    else:
        result["cases"] = {name: check(case["argv"], case.get("paths", {}), case.get("metrics_drafts"))
                           for name, case in request["cases"].items()}
    return result


if __name__ == "__main__":
    _probe.run(report, dict(_probe.VLLM_QUIET, **_probe.OFFLINE))
