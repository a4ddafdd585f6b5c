# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The vllm_serve role's probe: everything the role checks, read in one call
per node, and what of it differs from what the role wants.

On every cluster node (``raylet`` and ``gpu``): the raylet unit (its
InvocationID, which goes into a transient vLLM unit's environment, with
ActiveState, SubState and UnitFileState) and the processes holding the GPU
(gpu_procs.read, as the gpu_processes module reads them).

On the head, besides: the vLLM unit as systemd_run_service would find it
(systemd_run.Service, run in check mode: the fingerprint of the command,
environment and properties in its Description, the unit file and private
environment file of the service, ActiveState, SubState, UnitFileState, the
processes a signal stopped) and the action a run would take; the listeners
of the API port (procs.port_holders); `ray status` (ray_status.read);
the DFlash draft (dflash_draft.report); the staged checkpoints
(staging_probe.scans, as the staging role's status scans them); and the API: /health with the
recipe's smoke test within the hang check's timeout (vllm_health.check),
/v1/models (vllm_health.models) and the spec-decode counters.

Nothing here changes anything: each read is what the single-check module
reads, called from the same module_utils function.
"""

from __future__ import annotations

from ansible_collections.laguna.spark.plugins.module_utils import (
    dflash_draft, gpu_procs, hashcache, procs, prometheus, ray_status, staging_probe, systemd_run, systemd_user,
    vllm_client, vllm_health)

# The raylet unit's properties read on every node: InvocationID for vLLM's
# environment, the states whatever else is read.
RAYLET_PROPERTIES = tuple(dict.fromkeys(
    systemd_user.DEFAULT_PROPERTIES + ("SubState", "UnitFileState", "InvocationID")))
# systemd_run_service's options, with its defaults, that the unit option may leave out.
UNIT_DEFAULTS = dict(state="started", environment={}, properties={}, description="laguna-spark service",
                     working_directory=None, settle=3, runtime_dir=None, persistent=False, after=[],
                     restart_sec=10, restart="always", start_limit_interval=600, start_limit_burst=20,
                     start_env_script=None, start_env_keys=[], unit_dir=None, secret_environment={},
                     secret_environment_files={})
# /v1/models and /metrics: the verification's bound (vllm_models_info's default).
MODELS_TIMEOUT = 10


class ServiceView(object):
    """The module as systemd_run.Service sees it: the unit's options as its
    params, and always in check mode, where Service only reads and predicts."""

    def __init__(self, module, params):
        self._module = module
        self.params = params
        self.check_mode = True
        self._diff = False

    def __getattr__(self, name):
        return getattr(self._module, name)


def read_unit(module, options):
    """What systemd_run_service would do with ``options`` (its own options):
    {unit, changed, action, fingerprint, previous_fingerprint, stopped_pids,
    persistent, from_file, secret_differs, state (summarize()'s keys)}."""
    params = dict(UNIT_DEFAULTS, **{key: value for key, value in options.items() if value is not None})
    service = systemd_run.Service(ServiceView(module, params))
    environment = {str(k): str(v) for k, v in params["environment"].items()}
    properties = {str(k): str(v) for k, v in params["properties"].items()}
    if params["persistent"]:
        service.persistent(environment, properties)
    else:
        service.transient(environment, properties)
    result = service.result
    return dict(unit=service.unit, changed=bool(result["changed"]), action=result["action"],
                fingerprint=result.get("fingerprint"), previous_fingerprint=result.get("previous_fingerprint"),
                stopped_pids=list(result.get("stopped_pids") or []), wanted_persistent=bool(params["persistent"]),
                from_file=service.from_file, has_file=service.has_file,
                secret_differs=service.secret_text is not None,
                start_env_drift=result.get("start_env_drift") or {},
                state=systemd_user.summarize(service.unit, service.current))


def unit_differences(found):
    """One line per way the unit differs from what systemd_run_service wants."""
    if not found["changed"]:
        return []
    unit, props = found["unit"], found["state"]["properties"]
    lines = []
    if not found["state"]["running"]:
        lines.append("%s: ActiveState %s (SubState %s), wanted active" % (
            unit, props.get("ActiveState") or "unknown", props.get("SubState") or "unknown"))
    if found["stopped_pids"]:
        lines.append("%s: processes stopped by a signal (PID %s), wanted running" % (
            unit, ", ".join(str(pid) for pid in found["stopped_pids"])))
    if found["state"]["running"] and found["previous_fingerprint"] != found["fingerprint"]:
        lines.append("%s: runs configuration %s, wanted %s (the command, environment or properties changed)" % (
            unit, found["previous_fingerprint"] or "none", found["fingerprint"]))
    for key, values in sorted(found["start_env_drift"].items()):
        lines.append("%s: its process has %s=%s, wanted %s" % (unit, key, values.get("have"), values.get("want")))
    if found["wanted_persistent"] and found["state"]["running"] and props.get("UnitFileState") != "enabled":
        lines.append("%s: UnitFileState %s, wanted enabled" % (unit, props.get("UnitFileState") or "none"))
    if not found["wanted_persistent"] and found["has_file"]:
        lines.append("%s: a unit file of a persistent run is there, wanted a transient unit" % unit)
    if found["secret_differs"]:
        lines.append("%s: its private environment file differs from the wanted one" % unit)
    if not lines:
        lines.append("%s: its unit file or private environment file differs from the wanted one (%s)"
                     % (unit, found["action"] if found["action"] != "none" else "rewritten"))
    return lines


def read_raylet(module, unit):
    """The raylet unit's state (summarize()'s keys, ``properties`` with InvocationID)."""
    name = systemd_user.unit_name(unit)
    props = systemd_user.UserUnits(module).show_or_fail(name, RAYLET_PROPERTIES)
    return systemd_user.summarize(name, props)


def read_gpu(module, options, node):
    """gpu_procs.read() on this node; fails the module when nvidia-smi gives no list."""
    smi = options["nvidia_smi"]
    path = module.get_bin_path(smi) if "/" not in smi else smi
    found = gpu_procs.read(module.run_command, path, options["allowed_units"], node, options["timeout"])
    if found["error"]:
        module.fail_json(msg=("%s: " % smi if not path else "") + found["error"])
    return found


def read_ray(module, options):
    """One `ray status` (ray_status.read, the one reader), bounded as the ray_status module bounds it."""
    found = ray_status.read(module, options["ray"], options["address"], timeout=options["timeout"])
    found.setdefault("stderr_tail", [])
    return found


def ray_differences(found, tensor_parallel_size, running, address):
    if not found["reachable"]:
        return ["ray status at %s: unreachable (%s)" % (address, " | ".join(found["stderr_tail"]) or "no answer")]
    if running and found["gpus_total"] < tensor_parallel_size:
        return ["ray status: %g GPU(s) on %d node(s), wanted %d (one per tensor-parallel rank)"
                % (found["gpus_total"], found["node_count"], tensor_parallel_size)]
    if not running and found["gpus_free"] < tensor_parallel_size:
        return ["ray status: %g GPU(s) free of %g, wanted %d free for vLLM's start"
                % (found["gpus_free"], found["gpus_total"], tensor_parallel_size)]
    return []


def read_api(options):
    """The hang check (/health, then the smoke test, within ``timeout``), and
    when /health answers, /v1/models and (``spec``) the spec-decode counters.
    {health, models, spec, verified}: ``verified`` is what the verification
    would pass (served model listed, smoke answered, acceptance when asked)."""
    url, key, timeout = options["url"].rstrip("/"), options["api_key"], options["timeout"]
    health = vllm_health.check(url, timeout, api_key=key, smoke_options=options["smoke"])
    found = dict(health=health, models={"up": False, "status": -1, "models": [], "detail": "not asked"}, spec={})
    if health["state"] == vllm_health.HEALTHY:
        found["models"] = vllm_health.models(url, min(timeout, MODELS_TIMEOUT), api_key=key)
        if options["check_acceptance"]:
            try:
                totals = vllm_client.metric_sums(url, min(timeout, MODELS_TIMEOUT), api_key=key)
                found["spec"] = prometheus.spec_decode(totals)
            except Exception as exc:  # urllib raises several unrelated types
                found["spec"] = {"error": "Could not read %s/metrics: %s" % (url, exc)}
    smoke = health.get("smoke") or {}
    found["verified"] = bool(
        health["state"] == vllm_health.HEALTHY and (not options["smoke"] or smoke.get("ok"))
        and options["served_model_name"] in found["models"]["models"]
        and (not options["check_acceptance"] or found["spec"].get("accepted_tokens", 0) > 0))
    return found


def api_differences(found, options):
    url, health = options["url"].rstrip("/"), found["health"]
    if health["state"] != vllm_health.HEALTHY:
        return ["%s: %s (%s), wanted answering" % (url, health["state"], health["detail"])]
    lines = []
    smoke = health.get("smoke")
    if smoke is not None and not smoke.get("ok"):
        lines.append("%s: smoke test %s: %s" % (url, smoke.get("state"), smoke.get("message")))
    name = options["served_model_name"]
    if name not in found["models"]["models"]:
        lines.append("%s/v1/models: lists %s (%s), wanted %s" % (
            url, ", ".join(found["models"]["models"]) or "nothing", found["models"]["detail"], name))
    spec = found["spec"]
    if options["check_acceptance"] and spec.get("accepted_tokens", 0) <= 0:
        counted = "%d of %d draft tokens accepted" % (spec.get("accepted_tokens", 0), spec.get("draft_tokens", 0))
        lines.append("%s/metrics: %s, wanted draft tokens accepted" % (url, spec.get("error") or counted))
    return lines


def probe(module, params, node):
    """Every read the options ask for, and ``differences``."""
    result, differences = {}, []
    if params["raylet_unit"]:
        result["raylet"] = raylet = read_raylet(module, params["raylet_unit"])
        if not raylet["running"]:
            differences.append("%s: ActiveState %s (SubState %s), wanted active" % (
                raylet["unit"], raylet["active_state"], raylet["sub_state"]))
    if params["gpu"]:
        result["gpu"] = gpu = read_gpu(module, params["gpu"], node)
        if gpu["foreign"]:
            differences.append("%s: GPU held outside the cluster's units by %s" % (
                node, "; ".join(gpu_procs.describe(proc) for proc in gpu["foreign"])))
    unit = None
    if params["unit"]:
        try:
            result["unit"] = unit = read_unit(module, params["unit"])
        except ValueError as exc:
            module.fail_json(msg="%s: %s" % (systemd_user.unit_name(params["unit"]["name"]), exc))
        differences.extend(unit_differences(unit))
    if params["port"]:
        result["port"] = port = procs.port_holders(params["port"]["port"], params["port"]["allowed_unit"])
        if port["foreign"]:
            differences.append(port["message"])
    if params["checkpoints"]:
        # The staging role's status scans (staging_probe.scans), judged on the
        # controller (status_report kind=staging): what is staged is that role's to say.
        checkpoints = params["checkpoints"]
        result["checkpoints"] = staging_probe.scans(checkpoints["artifacts"],
                                                    hashcache.HashCache.load(checkpoints["hash_cache"]),
                                                    checkpoints["shard_pattern"])
    if params["draft"]:
        draft = params["draft"]
        result["draft"] = found = dflash_draft.report(draft["path"], draft["target_path"], draft["draft_repo"],
                                                      draft["draft_target_family"])
        found.pop("error", None)
        if found["problems"]:
            differences.append("draft %s: %s" % (draft["path"], " | ".join(found["problems"])))
    if params["ray"]:
        ray = params["ray"]
        running = bool(unit and (unit["state"]["running"] or unit["state"]["restarting"]))
        result["ray"] = found = read_ray(module, ray)
        differences.extend(ray_differences(found, ray["tensor_parallel_size"], running, ray["address"]))
    if params["api"]:
        try:
            result["api"] = found = read_api(params["api"])
        except ValueError as exc:
            module.fail_json(msg=str(exc))
        differences.extend(api_differences(found, params["api"]))
    result["differences"] = differences
    return result
