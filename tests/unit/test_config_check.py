"""config_check: types from the roles' argument specs, bounds from the table, unknown names,
the inventory and the running deployment."""
import glob
import json
import os
import pwd
import subprocess
import sys
import textwrap

import pytest
import yaml

from ansible_collections.laguna.spark.plugins.module_utils import config_check as cc
from ansible_collections.laguna.spark.plugins.modules import config_check

from helpers import ROOT
from helpers.collection import collections_path

SPEC_FILES = sorted(glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml")))
DOCUMENTS = [yaml.safe_load(open(path)) for path in SPEC_FILES]
SPECS, CONFLICTS = cc.merge_specs(DOCUMENTS)
# Variables config_check introduces; their specs are in roles/laguna.
PROPOSED = {"laguna_allow_shrink": {"type": "bool"},
            "laguna_unknown_variables": {"type": "str", "choices": ["fail", "warn"]}}
ALL_SPECS = dict(PROPOSED, **SPECS)


def test_the_roles_declare_each_variable_with_one_type():
    assert len(SPEC_FILES) >= 8
    assert CONFLICTS == []
    assert SPECS["vllm_serve_num_speculative_tokens"]["type"] == "int"


def test_every_bound_belongs_to_a_declared_variable_of_a_fitting_type():
    for name, bound in cc.BOUNDS.items():
        assert name in ALL_SPECS, "%s has a bound but no argument spec" % name
        kind = ALL_SPECS[name].get("type", "str")
        if bound.min is not None or bound.max is not None:
            assert kind in ("int", "float"), name
        if bound.fmt:
            assert kind in ("str", "path"), name
        if bound.elements or bound.min_items:
            assert kind == "list", name
        if bound.keys:
            assert kind == "dict", name


def test_every_declared_scalar_or_list_has_a_bound():
    unbounded = [name for name, spec in SPECS.items()
                 if spec.get("type", "str") in ("int", "float", "str", "path", "list") and name not in cc.BOUNDS]
    assert unbounded == []


def check(values, specs=None):
    return cc.check_values(ALL_SPECS if specs is None else specs, values)


def test_strings_from_extra_vars_are_coerced():
    config, converted, problems = check({"laguna_gpus_per_node": "1", "vllm_serve_num_speculative_tokens": "6",
                                         "preflight_min_free_gb": "122", "preflight_check_roce": "false",
                                         "laguna_api_port": 8000})
    assert problems == []
    assert config == {"laguna_gpus_per_node": 1, "vllm_serve_num_speculative_tokens": 6,
                      "preflight_min_free_gb": 122, "preflight_check_roce": False, "laguna_api_port": 8000}
    assert sorted(converted) == ["laguna_gpus_per_node", "preflight_check_roce", "preflight_min_free_gb",
                                 "vllm_serve_num_speculative_tokens"]


@pytest.mark.parametrize("name, value, expected", [
    ("vllm_serve_num_speculative_tokens", "0", "vllm_serve_num_speculative_tokens='0': below the minimum 1; expected int, between 1 and 32."),
    ("vllm_serve_kv_cache_memory_bytes", -5368709120, "vllm_serve_kv_cache_memory_bytes=-5368709120: below the minimum 1; expected int, >= 1."),
    ("laguna_api_port", 70000, "laguna_api_port=70000: above the maximum 65535"),
    ("laguna_gpus_per_node", 0, "laguna_gpus_per_node=0: below the minimum 1"),
    ("vllm_serve_memory_max", "12 GB", "vllm_serve_memory_max='12 GB': not a systemd memory size"),
    ("laguna_model_path", "~/models/x", "laguna_model_path='~/models/x': not an absolute path"),
    ("laguna_roce_ip", "192.168.100.300", "laguna_roce_ip='192.168.100.300': not an IPv4 address"),
    ("preflight_min_driver_version", "latest", "not a version such as 580"),
    ("vllm_serve_environment", {"NCCL DEBUG": "INFO"}, "key(s) 'NCCL DEBUG' not an environment variable name"),
    ("preflight_ssh_options", ["-o", ""], "item(s) '' not a non-empty command-line argument"),
])
def test_values_out_of_range_are_named_with_what_is_expected(name, value, expected):
    config, converted, problems = check({name: value})
    assert len(problems) == 1 and expected in problems[0], problems


@pytest.mark.parametrize("name, value, expected", [
    ("vllm_serve_num_speculative_tokens", "six", "vllm_serve_num_speculative_tokens='six': expected int, between 1 and 32"),
    ("preflight_check_ssh", "maybe", "preflight_check_ssh='maybe': expected bool"),
    ("preflight_venv_executables", {"a": 1}, "expected list of str"),
])
def test_values_of_the_wrong_type_are_refused(name, value, expected):
    config, converted, problems = check({name: value})
    assert len(problems) == 1 and expected in problems[0], problems
    assert name not in config


def test_choices_from_the_spec_are_enforced():
    config, converted, problems = check({"laguna_unknown_variables": "ignore"})
    assert len(problems) == 1 and "one of fail, warn" in problems[0]


def test_null_is_refused_where_a_value_is_needed_and_allowed_elsewhere():
    config, converted, problems = check({"laguna_venv": None, "ray_cluster_num_cpus": None,
                                         "vllm_patch_path": None})
    assert problems == ["laguna_venv is null; it must be set (path)."]


def test_suboptions_are_checked():
    config, converted, problems = check({"staging_artifacts": [{"name": "t", "repo": "a/b", "path": "/m",
                                                                "expected_shards": "24"}]})
    assert problems == [] and config["staging_artifacts"][0]["expected_shards"] == 24
    config, converted, problems = check({"staging_artifacts": [{"name": "t", "path": "/m"}]})
    assert len(problems) == 1 and "repo" in problems[0]


def test_a_tensor_parallel_size_larger_than_the_gpus_is_refused():
    """`-e laguna_gpus_per_node=1` used to make the default TP "11" on two nodes."""
    config, _coerced, problems = check({"laguna_gpus_per_node": "1", "vllm_serve_tensor_parallel_size": "11"})
    assert problems == []
    relations = cc.check_relations(config, nodes=2)
    assert relations == ["vllm_serve_tensor_parallel_size=11 needs 11 GPUs, but the cluster has 2 node(s) x "
                         "laguna_gpus_per_node=1 = 2 GPU(s)."]
    assert cc.check_relations({"laguna_gpus_per_node": 1, "vllm_serve_tensor_parallel_size": 2}, nodes=2) == []


def test_a_start_limit_that_a_crash_loop_never_reaches_is_refused():
    # systemd waits laguna_restart_sec before each restart: 20 starts span at
    # least 19 x 40 s, more than a 600 s window ever holds.
    assert cc.check_relations({"laguna_restart_sec": 40, "ray_cluster_start_limit_interval": 600,
                               "ray_cluster_start_limit_burst": 20}) == [
        "ray_cluster_start_limit_interval=600 is not longer than (ray_cluster_start_limit_burst=20 - 1) x "
        "laguna_restart_sec=40 = 760 s: systemd would restart a persistent unit that keeps failing forever. "
        "Raise the interval or lower the burst."]
    defaults = {"laguna_restart_sec": 10, "ray_cluster_start_limit_interval": 600, "ray_cluster_start_limit_burst": 20,
                "vllm_serve_start_limit_interval": 3600, "vllm_serve_start_limit_burst": 5}
    assert cc.check_relations(defaults) == []
    assert cc.check_relations(dict(defaults, vllm_serve_start_limit_interval=40))[0].startswith(
        "vllm_serve_start_limit_interval=40 is not longer than")
    assert cc.check_relations(dict(defaults, vllm_serve_start_limit_burst=1, vllm_serve_start_limit_interval=1)) == []


def test_memory_high_above_memory_max_is_refused():
    assert cc.check_relations({"ray_cluster_memory_high": "100G", "ray_cluster_head_memory_max": "98G",
                               "ray_cluster_worker_memory_max": "110G"}) == [
        "ray_cluster_memory_high=100G is above ray_cluster_head_memory_max=98G."]
    assert cc.check_relations({"ray_cluster_memory_high": "98G", "ray_cluster_worker_memory_max": "infinity"}) == []
    assert cc.parse_memory("1.5K") == 1536


def test_a_misspelled_variable_is_named_with_the_closest_known_one():
    known = set(SPECS) | {"staging_report", "preflight_driver"}
    found = cc.unknown_variables(
        ["vllm_serve_num_speculative_token", "laguna_roce_ip", "preflight_driver", "ansible_host",
         "my_own_var", "laguna_zzz_qqq"], known)
    assert found == [{"name": "laguna_zzz_qqq", "suggestion": None},
                     {"name": "vllm_serve_num_speculative_token", "suggestion": "vllm_serve_num_speculative_tokens"}]
    assert cc.unknown_text(found[1]) == ("vllm_serve_num_speculative_token is not a variable of laguna.spark "
                                         "(did you mean vllm_serve_num_speculative_tokens?).")


@pytest.mark.parametrize("head, ips, expected", [
    (["s1"], {"s1": "10.0.0.1", "s2": "10.0.0.2"}, []),
    (["s1"], {"s1": "10.0.0.1", "s2": "10.0.0.1", "s3": "10.0.0.3"},
     ["laguna_roce_ip 10.0.0.1 is given to 2 hosts (s1, s2); each node needs its own."]),
    (["s1"], {"s1": "10.0.0.1", "s2": None}, ["s2 has no laguna_roce_ip (its IPv4 address on the RoCE link)."]),
    (["s1"], {"s1": "10.0.0.1", "s2": "10.0.0"}, ["s2 has laguna_roce_ip='10.0.0', which is not an IPv4 address."]),
    (["s1", "s2"], {"s1": "10.0.0.1", "s2": "10.0.0.2"}, ["Group spark_head must hold exactly one host; it has 2 (s1, s2)."]),
])
def test_the_cluster_has_one_head_and_distinct_roce_addresses(head, ips, expected):
    assert cc.check_cluster(head, "spark_head", ips) == expected


EXEC_START = ("{ path=/home/spark/.venvs/vllm/bin/vllm ; argv[]=/home/spark/.venvs/vllm/bin/vllm serve "
              "/home/spark/models/Laguna-S-2.1-FP8 --served-model-name laguna-s-2.1 --host 0.0.0.0 --port 8000 "
              "--distributed-executor-backend ray --tensor-parallel-size 2 --max-model-len 262144 ; "
              "ignore_errors=no ; start_time=[Mon 2026-01-05 10:00:00 UTC] ; stop_time=[n/a] ; pid=4242 ; "
              "code=(null) ; status=0/0 }")


def test_the_running_tensor_parallel_size_is_read_from_the_unit():
    assert cc.running_tensor_parallel_size({"ActiveState": "active", "ExecStart": EXEC_START}) == 2
    assert cc.running_tensor_parallel_size(
        {"ActiveState": "active", "Description": "laguna-spark vllm serve laguna-s-2.1 (TP 4) [cfg 0123456789ab]"}) == 4
    assert cc.running_tensor_parallel_size({"ActiveState": "inactive", "ExecStart": EXEC_START}) is None
    assert cc.running_tensor_parallel_size({}) is None


def test_a_smaller_deployment_is_refused_unless_allowed():
    refused = cc.check_shrink(2, 1, 1, 1, False, "laguna-vllm", "spark-1")
    assert len(refused) == 1
    assert "--tensor-parallel-size 2; this run would restart it with 1 (1 node(s) x 1 GPU(s)" in refused[0]
    assert "laguna_allow_shrink: true" in refused[0]
    assert cc.check_shrink(2, 1, 1, 1, True, "laguna-vllm", "spark-1") == []
    assert cc.check_shrink(2, 4, 4, 1, False, "laguna-vllm", "spark-1") == []
    assert cc.check_shrink(None, 1, 1, 1, False, "laguna-vllm", "spark-1") == []


# The module, in-process.

def test_module_reports_every_problem_at_once(run_module):
    result = run_module(config_check, {
        "specs": DOCUMENTS,
        "values": {"vllm_serve_num_speculative_tokens": "0", "vllm_serve_kv_cache_memory_bytes": -1,
                   "laguna_gpus_per_node": "1"},
        "defined": ["vllm_serve_num_speculative_tokens", "vllm_serve_num_speculative_token", "laguna_gpus_per_node"],
        "known": [],
        "head_hosts": ["s1"], "roce_ips": {"s1": "10.0.0.1", "s2": "10.0.0.1"}, "nodes": 2,
    })
    assert result.failed
    assert result["msg"].startswith("Configuration refused, nothing was changed: ")
    assert len(result["problems"]) == 4, result["problems"]
    assert "vllm_serve_num_speculative_tokens='0': below the minimum 1" in result["msg"]
    assert "vllm_serve_kv_cache_memory_bytes=-1: below the minimum 1" in result["msg"]
    assert "did you mean vllm_serve_num_speculative_tokens?" in result["msg"]
    assert "laguna_roce_ip 10.0.0.1 is given to 2 hosts (s1, s2)" in result["msg"]
    assert result["coerced"] == ["laguna_gpus_per_node", "vllm_serve_num_speculative_tokens"]
    assert result["config"]["laguna_gpus_per_node"] == 1


def test_module_warns_only_when_asked(run_module):
    result = run_module(config_check, {"specs": DOCUMENTS, "defined": ["laguna_my_note"],
                                       "unknown_variables": "warn"})
    assert not result.failed and result["unknown"] == [{"name": "laguna_my_note", "suggestion": None}]
    assert "laguna_my_note is not a variable of laguna.spark" in json.dumps(result["warnings"])


def test_module_tells_the_account_it_ran_as(run_module):
    # The laguna role takes the service user's uid and home from here (the
    # task runs as that user): no second call to look the user up.
    account = pwd.getpwuid(os.getuid())
    result = run_module(config_check, {"specs": DOCUMENTS})
    assert result["user"] == {"name": account.pw_name, "uid": account.pw_uid, "home": account.pw_dir}


def running_vllm(tp):
    """The fake systemd's state (conftest's systemd fixture): laguna-vllm active at TP ``tp``."""
    with open(os.environ["FAKE_SYSTEMD_STATE"], "w") as fh:
        json.dump({"calls": [], "units": {"laguna-vllm.service": {
            "LoadState": "loaded", "ActiveState": "active", "SubState": "running", "MainPID": "4242",
            "Description": "laguna-spark vllm serve laguna-s-2.1 (TP %d) [cfg 0123456789ab]" % tp,
            "ExecStart": EXEC_START.replace("--tensor-parallel-size 2", "--tensor-parallel-size %d" % tp)}}}, fh)


def test_module_refuses_to_restart_a_running_tp2_with_one_node(systemd, run_module):
    running_vllm(2)
    args = {"running_unit": "laguna-vllm", "nodes": 1, "gpus_per_node": "1"}
    result = run_module(config_check, args)
    assert result.failed and result["running_tensor_parallel_size"] == 2
    assert result["planned_tensor_parallel_size"] == 1
    assert "laguna-vllm on" in result["msg"] and "--tensor-parallel-size 2; this run would restart it with 1" in result["msg"]
    assert not run_module(config_check, dict(args, allow_shrink=True)).failed
    assert not run_module(config_check, dict(args, nodes=2)).failed


def test_module_without_a_user_manager_sees_nothing_running(systemd, monkeypatch, run_module):
    running_vllm(2)
    monkeypatch.setenv("FAKE_SYSTEMD_NO_MANAGER", "1")
    result = run_module(config_check, {"running_unit": "laguna-vllm", "nodes": 1})
    assert not result.failed and result["running_tensor_parallel_size"] is None
    assert systemd.calls("systemctl")[-1][1:4] == ["--user", "show", "laguna-vllm.service"]


def test_an_api_open_to_the_network_without_a_key_is_warned_about_once():
    warning = cc.exposure_warnings({"vllm_serve_host": "0.0.0.0", "laguna_api_port": 8000}, {})
    assert len(warning) == 1 and "0.0.0.0:8000 without an API key" in warning[0]
    assert "vllm_serve_api_key" in warning[0] and "127.0.0.1" in warning[0]
    assert cc.exposure_warnings({"vllm_serve_host": "0.0.0.0"}, {"vllm_serve_api_key": "k" * 20}) == []
    assert cc.exposure_warnings({"vllm_serve_host": "127.0.0.1"}, {}) == []
    assert cc.exposure_warnings({"vllm_serve_host": "::1"}, {}) == []


def test_secrets_are_checked_but_never_returned_or_quoted(run_module):
    key = 'sk-has "a quote"'
    result = run_module(config_check, {"specs": DOCUMENTS, "values": {"vllm_serve_host": "0.0.0.0"},
                                       "secrets": {"vllm_serve_api_key": key}, "running_unit": "laguna-vllm"})
    assert result.failed and "vllm_serve_api_key=(hidden): not printable ASCII" in result["msg"]
    assert "a quote" not in json.dumps(result)
    fine = run_module(config_check, {"specs": DOCUMENTS, "values": {"vllm_serve_host": "0.0.0.0"},
                                     "secrets": {"vllm_serve_api_key": "sk-fine-0123456789"}})
    assert not fine.failed and "sk-fine" not in json.dumps(fine)
    open_api = run_module(config_check, {"specs": DOCUMENTS, "values": {"vllm_serve_host": "0.0.0.0"},
                                         "running_unit": "laguna-vllm"})
    assert "without an API key" in json.dumps(open_api.get("warnings", []))


# --- what the laguna role reads from the collection's files (lookup config_sources) ---------------


def _collection_texts():
    """{path: text} of the role and playbook files, sorted by path, as the role's find + file lookup gave them."""
    paths = sorted(glob.glob(os.path.join(ROOT, "roles", "**", "*.y*ml"), recursive=True)
                   + glob.glob(os.path.join(ROOT, "roles", "**", "*.j2"), recursive=True)
                   + glob.glob(os.path.join(ROOT, "playbooks", "**", "*.yml"), recursive=True))
    return dict((path, open(path).read().rstrip()) for path in paths)


def test_every_name_the_files_mention_counts_once_in_the_order_first_seen():
    texts = ["vllm_serve_port: 1\n# see laguna_head_host and vllm_serve_port", "x: 1_000 _private a_b9 9_no"]
    assert cc.mentioned_names(texts) == ["vllm_serve_port", "laguna_head_host", "a_b9"]
    assert cc.mentioned_names([]) == [] and cc.mentioned_names([None, ""]) == []


def test_the_declared_names_are_every_entry_points_options_once():
    documents = [{"argument_specs": {"main": {"options": {"a_x": {}, "a_y": {}}}, "status": {"options": {"a_x": {}}},
                                     "empty": {"short_description": "no options"}, "none": None}},
                 {"argument_specs": {"main": {"options": {"b_z": {"type": "int"}}}}}]
    assert cc.spec_option_names(documents) == ["a_x", "a_y", "b_z"]
    with pytest.raises(ValueError, match="without an argument_specs mapping"):
        cc.spec_option_names([{"something": "else"}])


def test_the_sources_parse_only_the_spec_files_and_search_every_file():
    texts = {"/c/roles/a/meta/argument_specs.yml": "argument_specs:\n  main:\n    options:\n      a_one: {type: int}",
             "/c/roles/a/tasks/main.yml": "- debug: {msg: '{{ a_two }}'}",
             "/c/roles/b/meta/argument_specs.yaml": "argument_specs: {main: {options: {b_three: {}}}}",
             "/c/roles/b/meta/main.yml": "argument_specs_not: {}"}
    found = cc.sources(texts, yaml.safe_load)
    assert found["specs"] == [{"argument_specs": {"main": {"options": {"a_one": {"type": "int"}}}}},
                              {"argument_specs": {"main": {"options": {"b_three": {}}}}}]
    assert found["spec_names"] == ["a_one", "b_three"]
    assert found["known"] == ["argument_specs", "a_one", "a_two", "b_three", "argument_specs_not"]


_LOOKUP = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from ansible.errors import AnsibleLookupError
    from ansible_collections.laguna.spark.plugins.lookup.config_sources import LookupModule
    out = []
    for terms in json.loads(sys.stdin.read()):
        try:
            out.append(LookupModule().run(terms, variables={}))
        except Exception as exc:  # pylint: disable=broad-except
            # ansible-core 2.19's AnsibleLookupError is another name of AnsibleTemplatePluginError.
            kind = "AnsibleLookupError" if isinstance(exc, AnsibleLookupError) else type(exc).__name__
            out.append("%s: %s" % (kind, exc))
    print(json.dumps(out))
    """)


def run_lookup(calls):
    """[result or "ErrorClass: message"] of the lookup config_sources for each list of terms, in a Python of
    its own: importing a controller plugin switches module warnings to the controller's display for the rest
    of the process."""
    proc = subprocess.run([sys.executable, "-c", _LOOKUP, collections_path()], input=json.dumps(calls),
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def test_the_lookup_reads_the_collections_own_files_as_the_role_did(tmp_path):
    broken = tmp_path / "broken" / "roles" / "x" / "meta" / "argument_specs.yml"
    broken.parent.mkdir(parents=True)
    broken.write_text("argument_specs: [unclosed\n")
    no_mapping = tmp_path / "no_mapping" / "roles" / "y" / "meta" / "argument_specs.yml"
    no_mapping.parent.mkdir(parents=True)
    no_mapping.write_text("argument_specs_not: {}\n")
    found, missing, not_parsed, not_specs = run_lookup([
        [os.path.join(ROOT, "roles"), os.path.join(ROOT, "playbooks")], [str(tmp_path / "nowhere")],
        [str(tmp_path / "broken" / "roles")], [str(tmp_path / "no_mapping")]])
    assert isinstance(found, list) and len(found) == 1, found
    found = found[0]
    texts = _collection_texts()
    spec_paths = [path for path in texts if path.endswith("/meta/argument_specs.yml")]
    assert found["specs"] == [yaml.safe_load(texts[path]) for path in spec_paths] and len(spec_paths) >= 8
    # Every declared variable, and among the known names every variable a default or task uses.
    assert set(found["spec_names"]) == set(SPECS)
    assert {"vllm_serve_num_speculative_tokens", "laguna_head_host", "benchmark_k_values"} <= set(found["known"])
    assert len(found["known"]) == len(set(found["known"]))
    # What the role computed before: find + the file lookup, then config_check.sources(); same order.
    assert found["spec_names"] == cc.sources(texts, yaml.safe_load)["spec_names"]
    assert found == cc.sources(texts, yaml.safe_load)
    assert missing.startswith("AnsibleLookupError: config_sources: ") and "nowhere is not a directory" in missing
    assert not_parsed.startswith("AnsibleLookupError: config_sources: %s: " % broken)
    assert not_specs == ("AnsibleLookupError: config_sources: %s: an argument_specs.yml without an argument_specs "
                         "mapping" % no_mapping)


def test_the_bound_constructors_state_one_kind_of_bound_each():
    assert vars(cc.fmt("abspath")) == vars(cc.Bound(fmt="abspath"))
    assert vars(cc.items("word")) == vars(cc.Bound(elements="word"))
    assert vars(cc.keys("envname")) == vars(cc.Bound(keys="envname"))
    assert vars(cc.between(1, 8)) == vars(cc.Bound(min=1, max=8))
    assert vars(cc.at_least(1)) == vars(cc.Bound(min=1))
    loose = cc.fmt("word")
    strict = cc.never_null(loose)
    assert vars(strict) == vars(cc.Bound(fmt="word", nullable=False)) and loose.nullable  # a copy
    assert strict.document() == "a non-empty word without spaces; never null"
    assert cc.between(0.05, 1.0).document() == "between 0.05 and 1.0"
