"""status_report / module_utils.status_reports: the staging, ray_cluster and
vllm_serve reports that the roles' status tasks record."""
from ansible_collections.laguna.spark.plugins.module_utils import status_reports as sr
from ansible_collections.laguna.spark.plugins.modules import status_report

MANIFEST = {"a.safetensors": {"size": 10, "sha256": "ab"}}


def scan(name, complete=True, manifest=None, problems=()):
    return {"item": {"name": name, "path": "/m/" + name}, "complete": complete, "shard_count": 24,
            "total_bytes": 121.5e9, "manifest": manifest if manifest is not None else MANIFEST,
            "problems": list(problems)}


def test_staging_head_complete():
    report = sr.staging([scan("target"), scan("draft")])
    assert report["ok"] and report["problems"] == []
    assert report["artifacts"][0]["summary"] == "target: 24 shard(s), 121.5 GB"


def test_staging_worker_differs_from_the_head_or_is_incomplete():
    other = {"a.safetensors": {"size": 10, "sha256": "cd"}}
    report = sr.staging([scan("target", manifest=other), scan("draft", complete=False, problems=["1 file(s) missing"])],
                        [scan("target"), scan("draft")], is_head=False, head_host="spark-1")
    assert not report["ok"]
    assert report["problems"] == ["target: 24 shard(s), 121.5 GB (differs from spark-1's copy: a.safetensors not the same)",
                                  "draft: 24 shard(s), 121.5 GB (1 file(s) missing)"]
    assert [a["complete"] for a in report["artifacts"]] == [False, False]
    # The same copy as the head's is complete.
    assert sr.staging([scan("target")], [scan("target")], is_head=False, head_host="spark-1")["ok"]


def test_staging_names_the_files_that_differ_and_those_outside_the_file_list():
    head = dict(MANIFEST, **{"b.json": 3, "c.json": 4})
    mine = dict(MANIFEST, **{"c.json": 5, "d.json": 6})
    report = sr.staging([scan("target", manifest=mine)], [scan("target", manifest=head)], is_head=False,
                        head_host="spark-1")
    assert report["problems"] == ["target: 24 shard(s), 121.5 GB (differs from spark-1's copy: b.json missing here, "
                                  "d.json only here, c.json not the same)"]
    # The head's files outside its recorded file list (the Hub's) are named, not compared.
    notes = dict(scan("target"), extra=["notes.txt"], shadowing=[])
    report = sr.staging([notes])
    assert report["ok"]
    assert report["artifacts"][0]["summary"] == ("target: 24 shard(s), 121.5 GB; 1 file(s) outside its file list, "
                                                 "left alone: notes.txt")
    assert sr.staging([scan("target")], [notes], is_head=False, head_host="spark-1")["ok"]
    # One that vLLM would read is the scan's problem (model_stage_info), not "left alone".
    shadow = dict(notes, complete=False, extra=["notes.txt", "x.json"], shadowing=[{"path": "x.json", "why": "w"}],
                  problems=["1 file(s) ... would be read as part of the model: x.json (w)"])
    report = sr.staging([shadow])
    assert not report["ok"] and report["artifacts"][0]["summary"] == (
        "target: 24 shard(s), 121.5 GB (1 file(s) ... would be read as part of the model: x.json (w)); "
        "1 file(s) outside its file list, left alone: notes.txt")


def node(host, state="active", linger="yes"):
    return {"host": host, "unit": "laguna-ray-worker", "state": state, "result": "exit-code", "linger": linger}


def test_ray_cluster_healthy():
    report = sr.ray_cluster([node("a"), node("b")], {"node_count": 2, "gpus_total": 2.0, "reachable": True,
                                                     "pending_demands": []}, 2, 2, "10.0.0.1:6379", 3)
    assert report["ok"] and report["summary"] == "ray status: 2 node(s), 2.0 GPU(s) at 10.0.0.1:6379"
    assert report["gid_index"] == 3


def test_ray_cluster_dead_worker_without_linger_names_both_causes_and_fixes():
    report = sr.ray_cluster([node("a"), node("b", state="failed", linger="no")],
                            {"node_count": 1, "gpus_total": 1.0, "reachable": True}, 2, 2, "10.0.0.1:6379")
    assert not report["ok"]
    text = " ".join(report["problems"])
    assert "shows 1 of 2 node(s) and 1.0 of 2 GPU(s)." in text
    assert "b: laguna-ray-worker is failed (exit-code), Linger=no." in text
    assert "Linger is off on b" in text and "--tags linger" in text
    assert "Inactive raylet service on b" in text and "--tags ray_cluster" in text


def test_ray_cluster_unreachable_head_outside_the_play():
    report = sr.ray_cluster([], {"reachable": False}, 2, 2, "10.0.0.1:6379")
    assert report["problems"] == ["ray status at 10.0.0.1:6379 shows 0 of 2 node(s) and 0.0 of 2 GPU(s) "
                                  "(head unreachable)."]


MODELS = {"status": 200, "json": {"data": [{"id": "laguna-s-2.1"}]}}


def test_vllm_serve_healthy_and_the_failures():
    good = sr.vllm_serve("laguna-vllm", "active", "http://h:8000", "laguna-s-2.1", MODELS, True,
                         {"draft_tokens": 100, "accepted_tokens": 60, "acceptance_rate": 0.6})
    assert good["ok"] and good["models"] == ["laguna-s-2.1"] and good["acceptance_rate"] == 0.6
    down = sr.vllm_serve("laguna-vllm", "failed", "http://h:8000", "laguna-s-2.1", {"status": -1})
    assert down["problems"] == ["laguna-vllm is failed", "http://h:8000/v1/models does not answer"]
    other = sr.vllm_serve("laguna-vllm", "active", "http://h:8000", "x", MODELS)
    assert other["problems"] == ["serving laguna-s-2.1, not x"]
    zero = sr.vllm_serve("laguna-vllm", "active", "http://h:8000", "laguna-s-2.1", MODELS, True,
                         {"draft_tokens": 100, "accepted_tokens": 0})
    assert zero["problems"] == ["spec-decode acceptance is 0: the draft does not match the target precision"]
    # Without a draft the counters are not judged.
    assert sr.vllm_serve("laguna-vllm", "active", "http://h:8000", "laguna-s-2.1", MODELS, False,
                         {"draft_tokens": 100, "accepted_tokens": 0})["ok"]


def test_module_reports_expected_counts_as_written(run_module):
    result = run_module(status_report, {"kind": "ray_cluster", "nodes": [node("a")], "expected_nodes": 2,
                                        "expected_gpus": 2, "ray_status": {"node_count": 1, "gpus_total": 1.0, "reachable": True},
                                        "address": "h:6379"})
    assert "shows 1 of 2 node(s) and 1.0 of 2 GPU(s)." in result["report"]["problems"][0]


def test_module_builds_each_kind(run_module):
    result = run_module(status_report, {"kind": "staging", "scans": [scan("target")]}, check_mode=True)
    assert not result["changed"] and result["report"]["ok"]
    result = run_module(status_report, {"kind": "ray_cluster", "nodes": [node("a")], "expected_nodes": 2,
                                        "expected_gpus": 2, "ray_status": {"node_count": 1}, "address": "h:6379"})
    assert not result["report"]["ok"]
    result = run_module(status_report, {"kind": "vllm_serve", "unit": "laguna-vllm", "unit_state": "active",
                                        "address": "http://h:8000", "served_model_name": "laguna-s-2.1",
                                        "models": MODELS})
    assert result["report"]["ok"] and result["report"]["url"] == "http://h:8000"


def test_units_gone_after_a_node_restart_say_so_and_how_to_bring_them_back():
    nodes = [{"host": "h", "unit": "laguna-ray-head", "state": "inactive", "result": "success", "linger": "yes",
              "loaded": False},
             {"host": "w", "unit": "laguna-ray-worker", "state": "inactive", "result": "success", "linger": "yes",
              "loaded": False}]
    report = sr.ray_cluster(nodes, {"reachable": False}, 2, 2, "10.0.0.1:6379")
    gone = [p for p in report["problems"] if "gone (not loaded)" in p]
    assert len(gone) == 1 and "laguna-ray-head on h, laguna-ray-worker on w" in gone[0]
    assert "--tags ray_cluster,vllm_serve" in gone[0] and "laguna_persistent_units: true" in gone[0]
    assert any(p.startswith("Inactive raylet service on h, w") for p in report["problems"])
    persistent = sr.ray_cluster(nodes, {}, 2, 2, "10.0.0.1:6379", persistent=True)
    assert any("no unit file is loaded" in p for p in persistent["problems"])
    served = sr.vllm_serve("laguna-vllm", "inactive", "http://h:8000", "m", unit_loaded=False, host="h")
    assert "laguna-vllm on h: gone (not loaded)" in served["problems"][0]
    # Real vLLM exits with status 0 when a TP worker dies: a transient unit is then gone, not failed.
    assert "a clean exit (vLLM exits with status 0 when one of its Ray workers dies" in served["problems"][0]
    assert "--tags ray_cluster,vllm_serve" in served["problems"][0]


def test_linger_is_on_only_when_loginctl_says_yes():
    assert sr.linger(0, "yes\n", "", "spark") == {"ok": True, "linger": "yes", "problems": []}
    assert sr.linger(0, "no", "", "spark") == {"ok": False, "linger": "no",
                                               "problems": ["Linger is not enabled for spark"]}
    failed = sr.linger(1, "", "Failed to get user: User ID 1000 is not logged in or lingering\n", "spark")
    assert failed["linger"] == "unknown (Failed to get user: User ID 1000 is not logged in or lingering)"
    assert not failed["ok"] and failed["problems"] == ["Linger is not enabled for spark"]
    # A yes from a failed command is no yes.
    assert not sr.linger(1, "yes", "", "spark")["ok"]


def test_the_patch_report_is_ok_only_when_already_patched():
    path = "/v/lib/python3.12/site-packages/vllm/model_executor/models/laguna_dflash.py"
    assert sr.vllm_patch({"patch_state": "already_patched", "path": path, "changed": False}) == {
        "ok": True, "path": path, "problems": []}
    assert sr.vllm_patch({"patch_state": "patched", "path": path, "changed": True}) == {
        "ok": False, "path": path, "problems": ["laguna_dflash.py is not patched (run --tags vllm_patch)"]}
    drift = sr.vllm_patch({"failed": True, "msg": "load_weights changed: vLLM is not 0.25.1"})
    assert drift == {"ok": False, "path": "", "problems": ["load_weights changed: vLLM is not 0.25.1"]}


def test_the_report_filter_calls_the_same_logic():
    from helpers.filters import run_filter  # pylint: disable=import-outside-toplevel

    patched, bad = run_filter("role_reports", "vllm_patch_report", [[{"patch_state": "already_patched", "path": "/p"}],
                                                                    [["already_patched"]]])
    assert patched == {"ok": True, "path": "/p", "problems": []}
    assert "vllm_patch_report: the input must be a laguna_dflash_patch result" in bad
