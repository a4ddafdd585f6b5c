import os
import stat

from ansible_collections.laguna.spark.plugins.module_utils import ray_status as parser
from ansible_collections.laguna.spark.plugins.modules import ray_status

from helpers import FIXTURES


def fixture(name):
    return open(os.path.join(FIXTURES, "ray_status", name)).read()


def fake_ray(tmp_path, stdout_file=None, rc=0, stderr="ray.exceptions.RpcError: Timed out while waiting for GCS"):
    script = tmp_path / "ray"
    body = "#!/bin/sh\n"
    body += 'echo "$@" > "%s/args"\n' % tmp_path
    if stdout_file:
        body += 'cat "%s"\n' % os.path.join(FIXTURES, "ray_status", stdout_file)
    body += 'echo "%s" >&2\nexit %d\n' % (stderr if rc else "", rc)
    script.write_text(body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_parse_two_nodes_recorded_from_ray_2_60():
    parsed = parser.parse(fixture("two_nodes.txt"))
    assert len(parsed["active_nodes"]) == 2
    assert parsed["active_nodes"][0].startswith("node_4e80")
    assert parsed["pending_nodes"] == [] and parsed["recent_failures"] == []
    assert parsed["resources"]["GPU"] == {"used": 0.0, "total": 3.0, "reserved": 0.0, "reserved_used": 0.0}
    assert parsed["resources"]["memory"]["total"] == 46.45 * 1024 ** 3
    assert parsed["pending_demands"] == []


def test_parse_pending_placement_group():
    parsed = parser.parse(fixture("waiting_for_placement_group.txt"))
    assert len(parsed["active_nodes"]) == 1
    assert parsed["pending_demands"] == ["{'GPU': 1.0} * 2 (SPREAD): 1+ pending placement groups"]


def test_parse_gpus_reserved_by_a_serving_placement_group():
    # Recorded in the molecule cluster while the stand-in vLLM held its TP bundles.
    parsed = parser.parse(fixture("serving_placement_group.txt"))
    assert len(parsed["active_nodes"]) == 2
    assert parsed["resources"]["GPU"] == {"used": 0.0, "total": 2.0, "reserved": 2.0, "reserved_used": 0.0}
    assert parsed["resources"]["CPU"]["total"] == 2.0


def test_module_reports_reserved_gpus(tmp_path, run_module):
    ray = fake_ray(tmp_path, "serving_placement_group.txt")
    result = run_module(ray_status, {"ray": ray, "address": "10.89.77.11:6379"})
    assert result["node_count"] == 2 and result["gpus_total"] == 2.0 and result["gpus_reserved"] == 2.0


def test_parse_older_usage_heading():
    text = "Active:\n 1 node_ab12\nResources\n----\nUsage:\n 1.0/2.0 GPU\nDemands:\n (no resource demands)\n"
    parsed = parser.parse(text)
    assert parsed["active_nodes"] == ["node_ab12"]
    assert parsed["resources"]["GPU"] == {"used": 1.0, "total": 2.0, "reserved": 0.0, "reserved_used": 0.0}


def test_module_reports_nodes_and_gpus(tmp_path, run_module):
    ray = fake_ray(tmp_path, "two_nodes.txt")
    result = run_module(ray_status, {"ray": ray, "address": "10.89.77.11:6379"})
    assert result["reachable"] and not result["changed"]
    assert result["node_count"] == 2 and result["gpus_total"] == 3.0
    assert (tmp_path / "args").read_text().split() == ["status", "--address", "10.89.77.11:6379"]


def test_unreachable_is_data_unless_asked_to_fail(tmp_path, run_module):
    ray = fake_ray(tmp_path, rc=1)
    result = run_module(ray_status, {"ray": ray, "address": "10.89.77.11:6379"})
    assert not result.failed and not result["reachable"] and result["node_count"] == 0
    result = run_module(ray_status, {"ray": ray, "address": "10.89.77.11:6379", "fail_on_unreachable": True})
    assert result.failed and "is the head raylet running" in result["msg"]


def test_free_gpus_leave_out_what_placement_groups_and_other_jobs_hold():
    serving = parser.parse("Total Usage:\n 0.0/2.0 GPU (0.0 used of 2.0 reserved in placement groups)\n")
    assert parser.free(serving["resources"]["GPU"]) == 0.0
    running = parser.parse("Total Usage:\n 2.0/2.0 GPU (2.0 used of 2.0 reserved in placement groups)\n")
    assert parser.free(running["resources"]["GPU"]) == 0.0
    other_job = parser.parse("Total Usage:\n 1.0/2.0 GPU\n")
    assert parser.free(other_job["resources"]["GPU"]) == 1.0
    idle = parser.parse("Total Usage:\n 0.0/2.0 GPU\n")
    assert parser.free(idle["resources"]["GPU"]) == 2.0


def counting_ray(tmp_path, outputs):
    """A `ray` that prints the recorded outputs in turn, then the last one again."""
    script = tmp_path / "ray"
    lines = ["#!/bin/sh", 'n=$(cat "%s/count" 2>/dev/null || echo 0)' % tmp_path,
             'echo $((n + 1)) > "%s/count"' % tmp_path, 'case "$n" in']
    for index, name in enumerate(outputs[:-1]):
        lines.append('  %d) cat "%s" ;;' % (index, os.path.join(FIXTURES, "ray_status", name)))
    lines += ['  *) cat "%s" ;;' % os.path.join(FIXTURES, "ray_status", outputs[-1]), "esac"]
    script.write_text("\n".join(lines) + "\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_waits_for_a_stopped_jobs_placement_groups_to_be_freed(tmp_path, run_module, monkeypatch):
    monkeypatch.setattr(ray_status, "WAIT_DELAY", 0.05)
    ray = counting_ray(tmp_path, ["serving_placement_group.txt", "serving_placement_group.txt", "two_nodes.txt"])
    result = run_module(ray_status, {"ray": ray, "address": "10.89.77.11:6379", "wait_free_gpus": 2})
    assert result["gpus_free"] == 3.0 and result["waited"] > 0
    assert (tmp_path / "count").read_text().strip() == "3"


def test_the_wait_is_bounded_and_returns_what_ray_shows_last(tmp_path, run_module, monkeypatch):
    monkeypatch.setattr(ray_status, "WAIT_DELAY", 0.05)
    ray = counting_ray(tmp_path, ["serving_placement_group.txt"])
    result = run_module(ray_status, {"ray": ray, "address": "10.89.77.11:6379", "wait_free_gpus": 2,
                                     "wait_timeout": 1})
    assert not result.failed and result["gpus_free"] == 0.0 and result["gpus_reserved"] == 2.0
    assert 0.9 <= result["waited"] <= 3
    # Without wait_free_gpus it reads once.
    (tmp_path / "count").unlink()
    run_module(ray_status, {"ray": ray, "address": "10.89.77.11:6379"})
    assert (tmp_path / "count").read_text().strip() == "1"


def test_waits_for_every_node_also_while_the_head_does_not_answer(tmp_path, run_module):
    script = tmp_path / "ray"
    script.write_text('#!/bin/sh\nn=$(cat "%s/count" 2>/dev/null || echo 0); echo $((n + 1)) > "%s/count"\n'
                      'if [ "$n" -lt 2 ]; then echo "Timed out while waiting for GCS" >&2; exit 1; fi\n'
                      'cat "%s"\n' % (tmp_path, tmp_path, os.path.join(FIXTURES, "ray_status", "two_nodes.txt")))
    script.chmod(0o755)
    result = run_module(ray_status, {"ray": str(script), "address": "10.89.77.11:6379", "wait_nodes": 2,
                                     "wait_gpus": 2, "wait_timeout": 30, "wait_delay": 0.05})
    assert result["reachable"] and result["node_count"] == 2 and result["gpus_total"] >= 2
    assert (tmp_path / "count").read_text().strip() == "3" and result["waited"] > 0


def test_a_node_wait_on_a_head_that_hangs_is_bounded_by_wait_timeout(tmp_path, run_module):
    # Each `ray status` against a gone head hangs until its own timeout: the
    # wait gives each call only the time left, so the whole is bounded.
    script = tmp_path / "ray"
    script.write_text("#!/bin/sh\nsleep 60\n")
    script.chmod(0o755)
    result = run_module(ray_status, {"ray": str(script), "address": "10.89.77.11:6379", "wait_nodes": 2,
                                     "timeout": 60, "wait_timeout": 6, "wait_delay": 1})
    assert not result.failed and not result["reachable"]
    assert result["waited"] < 12
