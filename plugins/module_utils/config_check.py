# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""Check the collection's variables as a play sees them.

One source of truth per fact about a variable:

* its type, element type, choices, sub-options, default and description: the
  role's ``meta/argument_specs.yml``, which the ``laguna`` role reads on the
  controller and passes to the ``config_check`` module (option ``specs``);
* its range or format: ``BOUNDS`` below, keyed by variable name. The roles'
  argument specs cannot hold it (ansible-lint's schema refuses extra keys
  there), so each bounded variable's description ends with the sentence
  ``doc_sentence()`` makes from its bound, written there by
  ``scripts/spec_bounds.py``: ``ansible-doc -t role`` shows the range, and
  nobody writes it by hand.

``tests/unit/test_spec_bounds.py`` keeps the two together: every bounded
name is declared in some ``argument_specs.yml`` with a fitting type, every
declared variable but a bool has an entry here (``ANY`` when free-form), each
description carries exactly the sentence of its bound (and none without one),
and every literal default in ``defaults/main.yml`` is the one its spec
documents and passes its type and bound.

Ansible cannot write a coerced value back over an extra var (``-e k=6``
arrives as the string ``"6"`` with the highest precedence), so this module
only *reports* the coerced values; the consumers are typed (module options,
``| int``, ``| bool``). What it enforces is that every value *can* be coerced
to its declared type and lies in range, that no variable with one of the
collection's prefixes is unknown to the collection (a misspelling is named,
with the closest known name), and that the cluster is consistent (one head,
a distinct RoCE address per node, no silent shrink of a running deployment).
"""

from __future__ import annotations

import difflib
import ipaddress
import re

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

# Variables whose name starts with one of these (and "_") belong to the
# collection: a name nothing in the collection mentions is reported.
PREFIXES = ("laguna", "preflight", "staging", "vllm_patch", "ray_cluster", "vllm_serve",
            "fabric_env", "fabric", "linger", "teardown", "venv", "ssh_mesh", "network_gate",
            "draft_quant", "benchmark", "firewall", "monitoring")


class Bound(object):
    """Range or format of one variable (applied after type coercion)."""

    def __init__(self, min=None, max=None, fmt=None, elements=None, keys=None, min_items=None,
                 nullable=True, each=None):
        self.min, self.max, self.fmt = min, max, fmt
        # ``each``: a Bound for every value of a dict (such as a port map).
        self.each = each
        self.elements, self.keys, self.min_items = elements, keys, min_items
        self.nullable = nullable

    def describe(self):
        parts = []
        if self.min is not None and self.max is not None:
            parts.append("between %s and %s" % (self.min, self.max))
        elif self.min is not None:
            parts.append(">= %s" % self.min)
        elif self.max is not None:
            parts.append("<= %s" % self.max)
        if self.fmt:
            parts.append(FORMATS[self.fmt][1])
        if self.min_items:
            parts.append("at least %d item(s)" % self.min_items)
        if self.elements:
            parts.append("each item %s" % FORMATS[self.elements][1])
        if self.keys:
            parts.append("each key %s" % FORMATS[self.keys][1])
        return ", ".join(parts)

    def document(self):
        """The bound as the roles' argument specs state it ("" when free-form)."""
        parts = [self.describe()] if self.describe() else []
        if self.each is not None and self.each.document():
            parts.append("each value " + self.each.document())
        if not self.nullable:
            parts.append("never null")
        return "; ".join(parts)


def _parses(parse, value):
    """Whether ``parse`` (an ipaddress constructor) takes ``value`` without a ValueError."""
    try:
        parse(value)
        return True
    except ValueError:
        return False


def _ipv4(value):
    return _parses(ipaddress.IPv4Address, str(value))


def _network(value):
    return _parses(lambda text: ipaddress.ip_network(text, strict=False), value)


def _ip(value):
    return _parses(ipaddress.ip_address, str(value))


# A Prometheus duration (model.ParseDuration), not zero: 15s, 1m30s, 15d.
_DURATION = re.compile(r"^(?=.*[1-9])(?:[0-9]+y)?(?:[0-9]+w)?(?:[0-9]+d)?(?:[0-9]+h)?(?:[0-9]+m)?(?:[0-9]+s)?(?:[0-9]+ms)?$")


def _host(value):
    return _ipv4(value) or value == "::" or bool(re.match(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$", value))


_MEMORY = re.compile(r"^(infinity|[0-9]+(\.[0-9]+)?[KMGTPE]?|[0-9]+(\.[0-9]+)?%)$")

# name -> (test, human description)
FORMATS = {
    "memory": (lambda v: bool(_MEMORY.match(v)),
               "a systemd memory size (bytes with an optional K, M, G, T, P or E suffix, a percentage, or infinity)"),
    "abspath": (lambda v: v.startswith("/"),
                "an absolute path (no ~: it would expand to the connecting user's home)"),
    "ipv4": (_ipv4, "an IPv4 address"),
    "host": (_host, "an IP address or host name"),
    "unit": (lambda v: bool(re.match(r"^[A-Za-z0-9:_.\\@-]+$", v)), "a systemd unit name"),
    "ifname": (lambda v: bool(re.match(r"^[^\s/:]{1,15}$", v)), "a network interface name (1-15 characters)"),
    "word": (lambda v: bool(re.match(r"^\S+$", v)), "a non-empty word without spaces"),
    "text": (lambda v: bool(v.strip()), "non-empty text"),
    "version": (lambda v: bool(re.match(r"^[0-9]+(\.[0-9]+)*$", v)), "a version such as 580 or 580.95"),
    "repo": (lambda v: bool(re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$", v)),
             "a Hugging Face repo id (owner/name)"),
    "envname": (lambda v: bool(re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", v)), "an environment variable name"),
    "property": (lambda v: bool(re.match(r"^[A-Z][A-Za-z0-9]*$", v)), "a systemd property name such as MemoryMax"),
    "url": (lambda v: bool(re.match(r"^(https?|file)://\S+$", v)), "an http(s) or file URL"),
    "option": (lambda v: bool(v) and not v.isspace(), "a non-empty command-line argument"),
    "source": (lambda v: _network(v) or _host(v), "an address, a CIDR or a host name"),
    "ip": (_ip, "an IP address (0.0.0.0 or :: listens on every address)"),
    "duration": (lambda v: bool(v) and bool(_DURATION.match(v)), "a Prometheus duration such as 30s, 5m or 15d"),
    "tsdb_size": (lambda v: v == "" or bool(re.match(r"^[0-9]+(B|KB|MB|GB|TB|PB|EB)$", v)),
                  "a size such as 4GB (B, KB, MB, GB, TB, PB or EB), or empty for none"),
    "target": (lambda v: bool(re.match(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}$", v)),
               "host:port ([address]:port for IPv6)"),
    "secret": (lambda v: v == "" or bool(re.match(r"^[!#%&(-\[\]-~]+$", v)),
               "printable ASCII without spaces, quotes, backslashes or $ (or empty)"),
}


def fmt(name):
    """The value has the format FORMATS[name]."""
    return Bound(fmt=name)


def items(name):
    """Every item of the list has the format FORMATS[name]."""
    return Bound(elements=name)


def keys(name):
    """Every key of the dict has the format FORMATS[name]."""
    return Bound(keys=name)


def between(low, high):
    """A number from ``low`` to ``high``, both included."""
    return Bound(min=low, max=high)


def at_least(low):
    """A number not below ``low``."""
    return Bound(min=low)


def never_null(bound):
    """A copy of ``bound`` that also refuses null."""
    return Bound(**dict(vars(bound), nullable=False))


ANY = Bound()  # declared free-form: any value of the declared type
PORT = between(1, 65535)
SECONDS = between(1, 7 * 24 * 3600)
COUNT = at_least(1)

# Range or format of every variable the roles declare (every one but a bool:
# ANY when free-form). Types, defaults and descriptions live in the roles'
# meta/argument_specs.yml; after a change here, run scripts/spec_bounds.py to
# write the bounds' sentences into those descriptions.
BOUNDS = {
    # laguna (the shared settings)
    "laguna_user": never_null(fmt("word")),
    "laguna_home": fmt("abspath"),
    "laguna_venv": never_null(fmt("abspath")),
    "laguna_cuda_home": fmt("abspath"),
    "laguna_head_group": fmt("word"),
    "laguna_worker_group": fmt("word"),
    "laguna_gpus_per_node": between(1, 8),
    "laguna_hca": fmt("word"),
    "laguna_hca_port": between(1, 255),
    "laguna_roce_ifname": fmt("ifname"),
    "laguna_roce_ip": never_null(fmt("ipv4")),
    "laguna_sysfs_infiniband": fmt("abspath"),
    "laguna_model_repo": fmt("repo"),
    "laguna_model_path": never_null(fmt("abspath")),
    "laguna_model_shards": COUNT,
    "laguna_draft_repo": fmt("repo"),
    "laguna_draft_path": never_null(fmt("abspath")),
    "laguna_ray_port": PORT,
    "laguna_api_port": PORT,
    "laguna_ray_head_unit": fmt("unit"),
    "laguna_ray_worker_unit": fmt("unit"),
    "laguna_vllm_unit": fmt("unit"),
    "laguna_nvidia_smi": fmt("word"),
    # preflight
    "preflight_min_driver_version": fmt("version"),
    "preflight_nvidia_smi": fmt("word"),
    "preflight_min_free_gb": between(0, 100000),
    "preflight_venv_executables": items("word"),
    "preflight_head_executables": items("word"),
    "preflight_sysfs_net": fmt("abspath"),
    "preflight_ssh_options": items("option"),
    "preflight_stray_pattern": fmt("text"),
    "preflight_stray_action": ANY,  # choices in the spec
    "preflight_stray_timeout": between(1, 600),
    "preflight_page_cache_paths": items("abspath"),
    # linger
    "linger_wait_timeout": SECONDS,
    # staging
    "staging_artifacts": Bound(min_items=1),
    "staging_shard_pattern": fmt("word"),
    "staging_hf_bin": fmt("abspath"),
    "staging_hf_environment": keys("envname"),
    "staging_download_timeout": SECONDS,
    "staging_progress_interval": between(1, 30),  # progress at least every 30 s
    "staging_space_reserve_gb": between(0, 10000),
    "staging_hash_cache": fmt("abspath"),
    "staging_mirror_streams": between(1, 64),
    "staging_mirror_timeout": SECONDS,
    "staging_rsync_options": items("option"),
    "staging_ssh_cipher": fmt("word"),
    "staging_ssh_options": items("option"),
    # vllm_patch
    "vllm_patch_path": fmt("abspath"),
    # ray_cluster
    "ray_cluster_num_gpus": between(1, 8),
    "ray_cluster_num_cpus": at_least(1),
    "ray_cluster_object_store_memory": at_least(78643200),  # Ray's own minimum, 75 MiB
    "ray_cluster_extra_args": items("option"),
    "ray_cluster_limit_memlock": fmt("memory"),
    "ray_cluster_memory_high": fmt("memory"),
    "ray_cluster_head_memory_max": fmt("memory"),
    "ray_cluster_worker_memory_max": fmt("memory"),
    "ray_cluster_memory_swap_max": fmt("memory"),
    "ray_cluster_extra_properties": keys("property"),
    "ray_cluster_drain_timeout": between(0, 3600),
    "ray_cluster_start_limit_interval": between(1, 86400),
    "ray_cluster_start_limit_burst": between(1, 1000),
    "ray_cluster_environment": keys("envname"),
    "ray_cluster_expected_nodes": COUNT,
    "ray_cluster_expected_gpus": COUNT,
    "ray_cluster_wait_retries": between(1, 10000),
    "ray_cluster_wait_delay": between(1, 600),
    "ray_cluster_status_timeout": SECONDS,
    # fabric_env
    "fabric_env_extra": keys("envname"),
    "fabric_env_gid_type": fmt("text"),
    "fabric_env_path_prepend": items("abspath"),
    "fabric_env_path_base": fmt("text"),
    "fabric_env_ray_memory_monitor_refresh_ms": between(0, 3600000),
    # fabric
    "fabric_confirm_timeout": SECONDS,
    "fabric_gid_policy": ANY,  # choices in the spec
    "fabric_min_twins": between(1, 8),
    "fabric_mtu": between(1280, 9216),
    "fabric_netplan_file": fmt("abspath"),
    "fabric_netplan_renderer": ANY,  # "" keeps the system default
    "fabric_prefix": between(8, 30),
    "fabric_rollback_seconds": SECONDS,
    "fabric_sysfs_net": fmt("abspath"),
    "fabric_twin_addresses": items("ipv4"),
    # network_gate
    "network_gate_base_port": between(1024, 65000),
    "network_gate_duration": between(1, 3600),
    "network_gate_min_gbps_per_device": between(0, 1000),
    "network_gate_min_gbps_total": between(0, 10000),
    "network_gate_package": fmt("word"),
    "network_gate_qps": between(1, 1024),
    "network_gate_size": between(1, 1 << 30),
    "network_gate_tool": ANY,  # choices in the spec
    "network_gate_tool_path": fmt("word"),
    # ssh_mesh
    "ssh_mesh_connect_timeout": between(1, 600),
    "ssh_mesh_extra_address_vars": items("envname"),
    "ssh_mesh_host_key_dir": fmt("abspath"),
    "ssh_mesh_host_key_types": items("word"),
    "ssh_mesh_key_type": ANY,  # choices in the spec
    "ssh_mesh_accept_changed_host_keys": ANY,
    # venv
    "venv_executables": items("word"),
    "venv_extra_index_urls": items("url"),
    "venv_index_url": fmt("url"),
    "venv_install_timeout": SECONDS,
    "venv_stale_install_timeout": between(1, 600),
    "venv_path": fmt("abspath"),
    "venv_path_base": fmt("text"),
    "venv_pins": items("word"),
    "venv_pip_args": items("option"),
    "venv_python": fmt("abspath"),
    "venv_system_packages": items("word"),
    # vllm_serve
    "vllm_serve_served_model_name": fmt("word"),
    "vllm_serve_host": fmt("host"),
    "vllm_serve_api_key": fmt("secret"),
    "vllm_serve_tensor_parallel_size": between(1, 64),
    "vllm_serve_distributed_executor_backend": fmt("word"),
    "vllm_serve_max_model_len": between(1, 262144),
    "vllm_serve_kv_cache_memory_bytes": at_least(1),
    "vllm_serve_max_num_seqs": between(1, 1024),
    "vllm_serve_max_num_batched_tokens": at_least(1),
    "vllm_serve_extra_args": items("option"),
    "vllm_serve_speculative_method": fmt("word"),
    "vllm_serve_speculative_extra": ANY,  # vLLM checks its own keys
    "vllm_serve_num_speculative_tokens": between(1, 32),
    "vllm_serve_memory_max": fmt("memory"),
    "vllm_serve_memory_swap_max": fmt("memory"),
    "vllm_serve_extra_properties": keys("property"),
    "vllm_serve_environment": keys("envname"),
    "vllm_serve_api_retries": between(1, 10000),
    "vllm_serve_api_delay": between(1, 600),
    "vllm_serve_request_timeout": SECONDS,
    "vllm_serve_ray_status_timeout": SECONDS,
    "vllm_serve_gpu_free_wait": between(0, 600),
    "vllm_serve_start_limit_interval": between(1, 86400),
    "vllm_serve_start_limit_burst": between(1, 1000),
    "vllm_serve_foreign_gpu_processes": ANY,  # choices in the spec
    "vllm_serve_smoke_prompt": fmt("text"),
    "vllm_serve_smoke_expect": ANY,  # "" accepts any answer
    "vllm_serve_gpu_memory_utilization": between(0.05, 1.0),
    "vllm_serve_health_timeout": between(1, 3600),
    "vllm_serve_smoke_max_tokens": between(1, 262144),
    "vllm_serve_warmup_requests": between(0, 100),
    "vllm_serve_warmup_max_tokens": between(1, 262144),
    "vllm_serve_draft_target_family": ANY,  # choices in the spec
    # draft_quant
    "draft_quant_group_size": ANY,  # choices in the spec
    "draft_quant_hf_bin": fmt("abspath"),
    "draft_quant_ignore": items("option"),
    "draft_quant_output_path": fmt("abspath"),
    "draft_quant_packages": items("word"),
    "draft_quant_pip_extra_args": ANY,  # "" for none
    "draft_quant_python": fmt("word"),
    "draft_quant_source_path": fmt("abspath"),
    "draft_quant_source_repo": fmt("repo"),
    "draft_quant_targets": items("option"),
    "draft_quant_timeout": SECONDS,
    "draft_quant_stale_timeout": between(1, 600),
    "draft_quant_venv": fmt("abspath"),
    # teardown
    "teardown_stray_pattern": fmt("text"),
    # config_check itself (roles/laguna)
    "laguna_unknown_variables": ANY,  # choices fail, warn
    "laguna_allow_shrink": ANY,
    "laguna_persistent_units": ANY,
    "laguna_restart_sec": between(1, 3600),
    "laguna_stop_timeout": between(1, 3600),
    "laguna_kill_mode": ANY,  # choices
    # Ray's authentication and ports (roles/laguna)
    "laguna_ray_auth": ANY,
    "laguna_ray_auth_token_path": fmt("abspath"),
    "laguna_ray_auth_token_generation": between(0, 1000000),
    "laguna_ray_ports": Bound(each=PORT),
    "laguna_monitoring_ports": Bound(each=PORT),
    # firewall
    "firewall_api_sources": items("source"),
    "firewall_extra_sources": items("source"),
    "firewall_path": never_null(fmt("abspath")),
    "firewall_table": fmt("word"),
    "laguna_fast_url_timeout": between(1, 300),
    # monitoring
    "monitoring_prometheus_listen_address": never_null(fmt("ip")),
    "monitoring_prometheus_port": PORT,
    "monitoring_retention_time": fmt("duration"),
    "monitoring_retention_size": fmt("tsdb_size"),
    "monitoring_scrape_interval": fmt("duration"),
    "monitoring_evaluation_interval": fmt("duration"),
    "monitoring_prometheus_extra_args": items("word"),
    "monitoring_node_exporter_extra_args": items("word"),
    "monitoring_node_exporter_listen_addresses": Bound(elements="ip", min_items=1),
    "monitoring_node_exporter_port": PORT,
    "monitoring_vllm_target": fmt("target"),
    "monitoring_alert_window": fmt("duration"),
    "monitoring_alert_acceptance_min": between(0.0, 1.0),
    "monitoring_alert_acceptance_for": fmt("duration"),
    "monitoring_alert_stall_for": fmt("duration"),
    "monitoring_alert_target_for": fmt("duration"),
    "monitoring_roce_netdevs": items("ifname"),
    "monitoring_roce_mtu": between(1280, 9216),
    "monitoring_roce_min_twins": between(1, 8),
    "monitoring_alert_roce_for": fmt("duration"),
    "monitoring_model_mountpoints": items("abspath"),
    "monitoring_alert_disk_free_gb": between(0, 100000),
    "monitoring_alert_disk_for": fmt("duration"),
    "monitoring_alert_ttft_p95_seconds": between(0.001, 86400),
    "monitoring_alert_ttft_for": fmt("duration"),
}

# The last item of a bounded variable's description in its role's
# meta/argument_specs.yml starts with this; scripts/spec_bounds.py writes it.
DOC_PREFIX = "Checked by M(laguna.spark.config_check): "


def doc_sentence(name, bounds=None):
    """The sentence that states ``name``'s bound in the argument specs, None when it has none."""
    bound = (BOUNDS if bounds is None else bounds).get(name)
    text = bound.document() if bound is not None else ""
    return DOC_PREFIX + text + "." if text else None


# Spec keys the checker passes on to Ansible's validator for one variable.
_SPEC_KEYS = ("type", "elements", "choices", "options", "no_log", "aliases", "mutually_exclusive",
              "required_together", "required_one_of", "required_if", "required_by")


def merge_specs(documents):
    """Options of every entry point of every argument_specs.yml -> {name: spec}.

    ``documents`` is a list of parsed files (``{"argument_specs": {...}}``).
    Returns (specs, conflicts); a name declared with different types is a
    conflict (the collection contradicts itself).
    """
    specs, conflicts = {}, []
    for document in documents or []:
        entries = (document or {}).get("argument_specs") or {}
        for entry in entries.values():
            for name, spec in ((entry or {}).get("options") or {}).items():
                spec = dict(spec or {})
                if name in specs:
                    old = specs[name]
                    if (old.get("type", "str"), old.get("elements")) != (spec.get("type", "str"), spec.get("elements")):
                        conflicts.append("%s is declared as %s and as %s" % (
                            name, type_text(old), type_text(spec)))
                    continue
                specs[name] = spec
    return specs, conflicts


def type_text(spec):
    text = spec.get("type", "str")
    if spec.get("elements"):
        text += " of %s" % spec["elements"]
    if spec.get("choices"):
        text += " (one of %s)" % ", ".join(str(c) for c in spec["choices"])
    return text


def _validator_spec(spec):
    out = dict((k, v) for k, v in spec.items() if k in _SPEC_KEYS and v is not None)
    out.setdefault("type", "str")
    return out


def coerce(name, spec, value):
    """(coerced value, error or None) with Ansible's own type conversion."""
    validator = ArgumentSpecValidator({name: _validator_spec(spec)})
    result = validator.validate({name: value})
    if result.error_messages:
        return value, "; ".join(result.error_messages)
    return result.validated_parameters.get(name), None


def check_bound(bound, raw, value):
    """Problems of one coerced value against its Bound."""
    problems = []
    if isinstance(value, bool):
        return problems
    if isinstance(value, (int, float)):
        if bound.min is not None and value < bound.min:
            problems.append("below the minimum %s" % bound.min)
        if bound.max is not None and value > bound.max:
            problems.append("above the maximum %s" % bound.max)
    if bound.fmt and isinstance(value, str):
        # A path is checked as given: type=path already expanded ~ with the
        # connecting user's home.
        given = raw if isinstance(raw, str) else value
        test, text = FORMATS[bound.fmt]
        if not test(given):
            problems.append("not %s" % text)
    if isinstance(value, list):
        if bound.min_items and len(value) < bound.min_items:
            problems.append("fewer than %d item(s)" % bound.min_items)
        if bound.elements:
            test, text = FORMATS[bound.elements]
            bad = [item for item in value if not (isinstance(item, str) and test(item))]
            if bad:
                problems.append("item(s) %s not %s" % (", ".join(repr(b) for b in bad), text))
    if isinstance(value, dict) and bound.keys:
        test, text = FORMATS[bound.keys]
        bad = [key for key in value if not test(str(key))]
        if bad:
            problems.append("key(s) %s not %s" % (", ".join(repr(b) for b in bad), text))
    if isinstance(value, dict) and bound.each is not None:
        for key in sorted(value):
            problems.extend("%s %s" % (key, text) for text in check_bound(bound.each, value[key], value[key]))
    return problems


def _show(value):
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def check_values(specs, values, bounds=None, hidden=False):
    """Coerce and range-check ``values`` (only names that are defined).

    Returns (coerced values, names whose value changed type, problems).
    ``hidden``: the values are secrets, never quoted in a problem.
    """
    bounds = BOUNDS if bounds is None else bounds
    coerced, converted, problems = {}, [], []
    for name in sorted(values):
        if name not in specs:
            continue
        spec, raw = specs[name], values[name]
        bound = bounds.get(name)
        if raw is None:
            if spec.get("required") or (bound is not None and not bound.nullable):
                problems.append("%s is null; it must be set (%s)." % (name, type_text(spec)))
            coerced[name] = None
            continue
        value, error = coerce(name, spec, raw)
        if error:
            problems.append("%s=%s: expected %s%s (%s)." % (
                name, "(hidden)" if hidden else _show(raw), type_text(spec),
                ", " + bound.describe() if bound is not None and bound.describe() else "", error))
            continue
        coerced[name] = value
        if type(value) is not type(raw):
            converted.append(name)
        if bound is not None:
            failed = check_bound(bound, raw, value)
            if failed:
                problems.append("%s=%s: %s; expected %s%s." % (
                    name, "(hidden)" if hidden else _show(raw), "; ".join(failed), type_text(spec),
                    ", " + bound.describe() if bound.describe() else ""))
    return coerced, converted, problems


def as_int(value, fallback):
    """``value`` as an int (Ansible's conversion), ``fallback`` when unset or not an integer."""
    if value is None or isinstance(value, bool):
        return fallback
    converted, error = coerce("value", {"type": "int"}, value)
    return fallback if error else converted


def parse_memory(text):
    """systemd memory size -> bytes (None for infinity or a percentage)."""
    text = str(text)
    if text == "infinity" or text.endswith("%"):
        return None
    factor = 1
    if text[-1] in "KMGTPE":
        factor = 1024 ** ("KMGTPE".index(text[-1]) + 1)
        text = text[:-1]
    return int(float(text) * factor)


def check_relations(coerced, nodes=None):
    """Problems between variables (only those defined in this play)."""
    problems = []
    gpus = coerced.get("laguna_gpus_per_node")
    tp = coerced.get("vllm_serve_tensor_parallel_size")
    if nodes and gpus and tp and tp > nodes * gpus:
        problems.append(
            "vllm_serve_tensor_parallel_size=%s needs %s GPUs, but the cluster has %d node(s) x "
            "laguna_gpus_per_node=%s = %d GPU(s)." % (tp, tp, nodes, gpus, nodes * gpus))
    high = coerced.get("ray_cluster_memory_high")
    for cap in ("ray_cluster_head_memory_max", "ray_cluster_worker_memory_max"):
        top = coerced.get(cap)
        if not high or not top:
            continue
        try:
            h, t = parse_memory(high), parse_memory(top)
        except ValueError:
            continue
        if h is not None and t is not None and h > t:
            problems.append("ray_cluster_memory_high=%s is above %s=%s." % (high, cap, top))
    restart_sec = coerced.get("laguna_restart_sec")
    for role in ("ray_cluster", "vllm_serve"):
        # systemd waits laguna_restart_sec before each restart: a window no
        # longer than burst - 1 of those never holds burst starts, so a crash
        # loop of a persistent unit would never end.
        interval = coerced.get(role + "_start_limit_interval")
        burst = coerced.get(role + "_start_limit_burst")
        if restart_sec and interval and burst and interval <= (burst - 1) * restart_sec:
            problems.append(
                "%s_start_limit_interval=%s is not longer than (%s_start_limit_burst=%s - 1) x laguna_restart_sec=%s "
                "= %d s: systemd would restart a persistent unit that keeps failing forever. Raise the interval or "
                "lower the burst." % (role, interval, role, burst, restart_sec, (burst - 1) * restart_sec))
    poll, timeout = coerced.get("staging_progress_interval"), coerced.get("staging_download_timeout")
    if poll and timeout and poll > timeout:
        problems.append("staging_progress_interval=%s is longer than staging_download_timeout=%s." % (poll, timeout))
    return problems


def is_loopback(host):
    """Whether an address to bind (vllm_serve_host) is reachable from this host only."""
    if host in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_warnings(config, secrets):
    """Warnings about what the configuration opens to the network."""
    host = config.get("vllm_serve_host")
    if host is None or is_loopback(str(host)) or secrets.get("vllm_serve_api_key"):
        return []
    return ["vLLM serves its API on %s:%s without an API key: anyone who reaches that port uses the model. "
            "Set vllm_serve_api_key (in Ansible Vault, or export LAGUNA_VLLM_API_KEY), or vllm_serve_host: "
            "127.0.0.1 to keep the API to the head." % (host, config.get("laguna_api_port", 8000))]


# What counts as a variable name in the collection's files (roles, playbooks,
# templates): the laguna role's validation collects every match, and a
# defined variable with a collection prefix that none of them is is unknown.
NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*_[A-Za-z0-9_]+")
# Which of those files declare variables.
SPEC_FILE = re.compile(r"/meta/argument_specs\.ya?ml$")


def _unique(names):
    seen, out = set(), []
    for name in names:
        if name not in seen:
            seen.add(name)
            out.append(name)
    return out


def mentioned_names(texts):
    """Every NAME in ``texts``, once each, in the order first seen."""
    return _unique(name for text in texts for name in NAME.findall(text or ""))


def _entry_points(document):
    """The argument_specs mapping of a parsed argument_specs.yml; ValueError if it has none."""
    if not isinstance(document, dict) or not isinstance(document.get("argument_specs"), dict):
        raise ValueError("an argument_specs.yml without an argument_specs mapping")
    return document["argument_specs"]


def spec_option_names(documents):
    """The option names of every entry point of every parsed argument_specs.yml, once each, in order."""
    names = []
    for document in documents or []:
        for entry in _entry_points(document).values():
            names.extend(list((entry or {}).get("options") or {}))
    return _unique(names)


def sources(texts, load):
    """What the laguna role's validation reads from the collection's files.

    ``texts`` maps each file's path to its text, in the order to read them;
    ``load`` parses YAML (the config_sources lookup passes Ansible's own from_yaml). Returns
    {"specs": [the parsed argument_specs.yml files], "spec_names": [every
    declared variable], "known": [every NAME in any file]}. A spec file that
    does not parse or has no argument_specs mapping raises ValueError naming it.
    """
    specs = []
    for path, text in texts.items():
        if SPEC_FILE.search(path):
            try:
                document = load(text)
                _entry_points(document)
            except Exception as exc:  # whatever ``load`` raises for a file that does not parse
                raise ValueError("%s: %s" % (path, exc)) from exc
            specs.append(document)
    return {"specs": specs, "spec_names": spec_option_names(specs), "known": mentioned_names(texts.values())}


def has_prefix(name, prefixes=PREFIXES):
    return any(name.startswith(prefix + "_") for prefix in prefixes)


def unknown_variables(defined, known, prefixes=PREFIXES, candidates=None):
    """Defined names with a collection prefix that nothing in the collection knows.

    Returns [{"name", "suggestion"}] (suggestion None when nothing is close).
    """
    known = set(known)
    pool = sorted(set(candidates) if candidates is not None else known)
    found = []
    for name in sorted(set(defined)):
        if not has_prefix(name, prefixes) or name in known:
            continue
        close = difflib.get_close_matches(name, pool, n=1, cutoff=0.85)
        found.append({"name": name, "suggestion": close[0] if close else None})
    return found


def unknown_text(item):
    if item["suggestion"]:
        return "%s is not a variable of laguna.spark (did you mean %s?)." % (item["name"], item["suggestion"])
    return "%s is not a variable of laguna.spark; nothing in the collection reads it." % item["name"]


def check_cluster(head_hosts, head_group, roce_ips):
    """One head, and a distinct valid RoCE address for every node."""
    problems = []
    head_hosts = list(head_hosts or [])
    if len(head_hosts) != 1:
        problems.append("Group %s must hold exactly one host; it has %d (%s)." % (
            head_group, len(head_hosts), ", ".join(head_hosts) or "none"))
    owners = {}
    for host in sorted(roce_ips or {}):
        address = roce_ips[host]
        if address in (None, ""):
            problems.append("%s has no laguna_roce_ip (its IPv4 address on the RoCE link)." % host)
            continue
        if not _ipv4(address):
            problems.append("%s has laguna_roce_ip=%s, which is not an IPv4 address." % (host, _show(address)))
            continue
        owners.setdefault(str(address), []).append(host)
    for address in sorted(owners):
        if len(owners[address]) > 1:
            problems.append("laguna_roce_ip %s is given to %d hosts (%s); each node needs its own." % (
                address, len(owners[address]), ", ".join(owners[address])))
    return problems


_TP_ARG = re.compile(r"(?:--tensor-parallel-size|-tp)(?:=|\s+)([0-9]+)")
_TP_DESCRIPTION = re.compile(r"\(TP ([0-9]+)\)")


def running_tensor_parallel_size(show):
    """TP size of a running vLLM unit from `systemctl show` properties, or None.

    ExecStart carries the command line; the Description that
    systemd_run_service writes for vllm_serve carries "(TP N)" too.
    """
    if show.get("ActiveState") not in ("active", "activating", "reloading"):
        return None
    match = _TP_ARG.search(show.get("ExecStart") or "")
    if match:
        return int(match.group(1))
    match = _TP_DESCRIPTION.search(show.get("Description") or "")
    if match:
        return int(match.group(1))
    return None


def check_shrink(running_tp, planned_tp, nodes, gpus_per_node, allow_shrink, unit, host):
    if running_tp is None or planned_tp is None or planned_tp >= running_tp:
        return []
    if allow_shrink:
        return []
    return ["%s on %s is serving with --tensor-parallel-size %d; this run would restart it with %d "
            "(%d node(s) x %d GPU(s) per node). If the inventory lost a node or laguna_gpus_per_node is "
            "wrong, fix it; to shrink the deployment on purpose, set laguna_allow_shrink: true."
            % (unit, host, running_tp, planned_tp, nodes, gpus_per_node)]
