"""scripts/monitoring_test_cost.py: what monitoring adds to the test command, read from one run's logs."""
import os
import sys

from helpers import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import monitoring_test_cost as cost  # noqa: E402  pylint: disable=wrong-import-position

E = "\x1b[36m"  # molecule's log has colours
MOLECULE = [
    "21:37:48 %sINFO  default ➜ check: Executing\x1b[0m" % E,
    "21:37:50   │ TASK [laguna.spark.venv : Install]",
    "21:37:53   │ TASK [laguna.spark.monitoring : Read this node's packages]",
    "21:37:57   │ TASK [laguna.spark.monitoring : Write the config]",
    "21:37:58   │ TASK [laguna.spark.ray_cluster : Run the head raylet]",
    "21:38:10   │ PLAY RECAP",
    "21:38:11 INFO  default ➜ verify: Executing",
    "21:38:11 INFO  default ➜ verify: Executing Testinfra tests found in /x",
    "21:38:20 INFO  default ➜ check: Executing",
    "21:38:21   │ TASK [laguna.spark.monitoring : Read this node's packages]",
    "21:38:31   │ PLAY RECAP",
    "23:59:58 INFO  default ➜ side_effect: Executing",
    "23:59:59   │ TASK [laguna.spark.teardown : Read what the monitoring role installed]",
    "00:00:02   │ TASK [laguna.spark.teardown : Purge the packages the monitoring role",
    "00:00:02   │   installed] *****",
    "00:00:04   │ TASK [laguna.spark.teardown : Remove the user units]",
    "00:00:09   │ PLAY RECAP",
    "a line without a time",
]
FAULTS = [
    "============================== slowest durations ===============================",
    "85.17s call     molecule/default/faults/test_monitoring.py::test_zero_acceptance_fires",
    "5.90s setup    molecule/default/faults/test_monitoring.py::test_every_dashboard_panel_has_data",
    "1.99s call     molecule/default/faults/test_monitoring.py::test_every_dashboard_panel_has_data",
    "0.96s call     molecule/default/faults/test_intruder.py::test_the_node_exporters_answer_the_cluster",
    "41.27s call     molecule/default/faults/test_intruder.py::test_a_stranger_cannot_join",
    "210.81s call     molecule/default/faults/test_faults.py::test_a_changed_head_gid_index",
]


def test_the_monitoring_tasks_are_timed_per_step_until_the_next_task_or_recap():
    names = {"laguna.spark.teardown : Read what the monitoring role installed",
             "laguna.spark.teardown : Purge the packages the monitoring role installed"}
    # The purge's name wraps in the log: its first line counts as the name.
    assert cost.task_seconds(MOLECULE, names) == {"check": 5, "check#2": 10, "side_effect": 5}
    only_read = {"laguna.spark.teardown : Read what the monitoring role installed"}
    assert cost.task_seconds(MOLECULE, only_read) == {"check": 5, "check#2": 10, "side_effect": 3}
    assert cost.task_seconds(MOLECULE) == {"check": 5, "check#2": 10}


def test_only_the_monitoring_tests_are_counted_with_setup_call_and_teardown():
    assert cost.test_seconds(FAULTS) == {
        "test_monitoring.py::test_zero_acceptance_fires": 85.17,
        "test_monitoring.py::test_every_dashboard_panel_has_data": 7.89,
        "test_intruder.py::test_the_node_exporters_answer_the_cluster": 0.96}


def test_the_total_is_held_against_the_issue_limit_and_says_what_it_does_not_count():
    result = cost.cost(MOLECULE, FAULTS, {"laguna.spark.teardown : Read what the monitoring role installed"})
    assert result["total_s"] == round(18 + 85.17 + 7.89 + 0.96, 1) and result["within_limit"]
    assert result["limit_s"] == 240 and "ray[default]" in result["not_counted"]
    over = cost.cost(MOLECULE, FAULTS + ["200.0s call molecule/default/faults/test_monitoring.py::test_x"], set())
    assert not over["within_limit"]


def test_the_teardown_block_is_read_from_the_role():
    names = cost.teardown_task_names()
    assert "laguna.spark.teardown : Purge the packages the monitoring role installed" in names
    assert all(name.startswith("laguna.spark.teardown : ") for name in names) and len(names) >= 3
