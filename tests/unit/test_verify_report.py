"""playbooks/verify.yml's report of one node: filter verify_report (plugins/filter/verify_report.py)."""
from helpers.filters import run_filter

HEAD, WORKER = "spark-1", "spark-2"


def reports(is_head, **changes):
    """A node's reports, each with one problem of its own, as verify.yml gathers them."""
    settings = {
        "host": HEAD if is_head else WORKER, "is_head": is_head, "gid_index": 3,
        "linger": {"ok": True, "linger": "yes", "problems": []},
        "staging": {"ok": False, "problems": ["target: 1 file(s) missing"]},
        "vllm_patch": {"ok": False, "path": "/p", "problems": ["patch not applied"]},
        "ray_cluster": {"ok": False, "problems": ["spark-2: raylet failed"],
                        "nodes": [{"host": HEAD, "state": "active"}, {"host": WORKER, "state": "failed"}]},
        "gpu": {"processes": [{"pid": 7}], "foreign": False, "message": "no foreign process"},
        "ray_cluster_drift": {"differences": ["command differs"], "problems": ["raylet drifted"], "running": True},
        "vllm_serve": None, "monitoring": False, "monitoring_status": None,
        # On a worker, the skipped comparison's result.
        "vllm_serve_drift": {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"},
    }
    if is_head:
        settings.update(vllm_serve={"ok": True, "problems": ["acceptance low"]},
                        vllm_serve_drift={"differences": ["environment differs"], "problems": ["vllm drifted"],
                                          "running": True})
    settings.update(changes)
    return settings


def report_of(*settings):
    return run_filter("verify_report", "verify_report", [[s] for s in settings])


def test_the_head_reports_the_cluster_the_server_and_both_units_drift():
    head, = report_of(reports(True))
    assert head == {
        "host": HEAD, "role": "head", "gid_index": 3,
        "linger": {"ok": True, "linger": "yes", "problems": []},
        "staging": {"ok": False, "problems": ["target: 1 file(s) missing"]},
        "vllm_patch": {"ok": False, "path": "/p", "problems": ["patch not applied"]},
        "ray_cluster": reports(True)["ray_cluster"],
        "vllm_serve": {"ok": True, "problems": ["acceptance low"]},
        "gpu_processes": [{"pid": 7}], "monitoring": None,
        "drift": ["command differs", "environment differs"],
        "problems": ["target: 1 file(s) missing", "patch not applied", "spark-2: raylet failed", "acceptance low",
                     "raylet drifted", "vllm drifted"]}
    assert list(head) == ["host", "role", "gid_index", "linger", "staging", "vllm_patch", "ray_cluster", "vllm_serve",
                          "gpu_processes", "monitoring", "drift", "problems"]


def test_a_worker_reports_its_own_raylet_and_no_server():
    worker, = report_of(reports(False, monitoring=True))
    assert worker["role"] == "worker"
    assert worker["ray_cluster"] == {"host": WORKER, "state": "failed"}
    assert worker["vllm_serve"] is None and worker["monitoring"] is None
    assert worker["drift"] == ["command differs"]
    # The cluster's problems are the head's to report.
    assert worker["problems"] == ["target: 1 file(s) missing", "patch not applied", "raylet drifted"]


def test_a_unit_that_does_not_run_leaves_its_drift_out_of_the_problems():
    stopped = {"differences": ["state: inactive"], "problems": ["not running"], "running": False}
    head, = report_of(reports(True, ray_cluster_drift=stopped, vllm_serve_drift=dict(stopped, differences=[])))
    assert head["drift"] == ["state: inactive"]
    assert head["problems"] == ["target: 1 file(s) missing", "patch not applied", "spark-2: raylet failed",
                                "acceptance low"]


def test_a_foreign_gpu_process_is_a_problem():
    gpu = {"processes": [{"pid": 9}], "foreign": True, "message": "pid 9 (python) holds the GPU"}
    worker, = report_of(reports(False, gpu=gpu))
    assert worker["gpu_processes"] == [{"pid": 9}]
    assert worker["problems"][2] == "pid 9 (python) holds the GPU"


def test_monitoring_on_the_head_reports_a_silent_prometheus_and_firing_alerts():
    silent, firing, quiet, off = report_of(
        reports(True, monitoring=True, monitoring_status={"failed": True, "msg": "Prometheus did not answer"}),
        reports(True, monitoring=True, monitoring_status={"rows": [{}], "firing": [{"alert": "LagunaNodeDown"}],
                                                          "table": ["row"], "message": "1 alert firing: LagunaNodeDown"}),
        reports(True, monitoring=True, monitoring_status={"rows": [{}], "firing": [], "table": ["row"],
                                                          "message": "no alert firing"}),
        reports(True, monitoring=False, monitoring_status={"rows": [{}], "firing": [{"alert": "x"}], "table": []}))
    assert silent["monitoring"] == {"firing": [], "table": []}
    assert silent["problems"][-1] == "Prometheus did not answer"
    assert firing["monitoring"] == {"firing": [{"alert": "LagunaNodeDown"}], "table": ["row"]}
    assert firing["problems"][-1] == "1 alert firing: LagunaNodeDown"
    assert quiet["monitoring"] == {"firing": [], "table": ["row"]} and quiet["problems"][-1] == "vllm drifted"
    assert off["monitoring"] is None and off["problems"][-1] == "vllm drifted"


def test_missing_reports_are_named():
    no_node, no_server, lacking, not_a_mapping = report_of(
        reports(False, host="spark-9"),
        reports(True, vllm_serve=None),
        reports(False, staging={"ok": True}),
        "reports")
    assert "verify_report: the ray_cluster report has no node spark-9" in no_node
    assert "verify_report: vllm_serve must be the node's report(s)" in no_server
    assert "verify_report: a report lacks 'problems'" in lacking
    assert "verify_report: the input must be a mapping" in not_a_mapping
