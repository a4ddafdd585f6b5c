"""monitoring_probe / module_utils.monitoring_probe: the monitoring role's one read per node.

decide() on recorded reads (a node as wanted has no difference; one test per kind of
difference), then the module in-process on a fake node: a state directory, the files the role
writes, a fake dpkg-query and a fake systemctl on PATH (which records the arguments it was asked
with: ActiveState, SubState and UnitFileState always) and a stand-in for Prometheus's /-/ready.
The role's tasks are checked to act only on the probe's keys (a node as wanted reaches no task but
the probe's), since no localhost test can run the role (apt, the daemons' system units).
"""

import grp
import hashlib
import http.server
import json
import os
import pwd

import pytest
import yaml

from ansible_collections.laguna.spark.plugins.module_utils import monitoring_probe as mp
from ansible_collections.laguna.spark.plugins.modules import monitoring_node_info
from ansible_collections.laguna.spark.plugins.modules import monitoring_probe as monitoring_probe_module
from helpers import ROOT
from helpers.fake_bin import on_path, python_script

USER = pwd.getpwuid(os.geteuid()).pw_name
GROUP = grp.getgrgid(os.getegid()).gr_name
EXPORTER_DEFAULT = 'ARGS="--web.listen-address=127.0.0.1:9100"\n'
AS_WANTED = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "UnitFileState": "enabled"}

FAKE_SYSTEMCTL = r'''
import json, os, sys
units = json.loads(os.environ["FAKE_UNITS"])
with open(os.environ["FAKE_SYSTEMCTL_CALLS"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\n")
if sys.argv[1] != "show":
    sys.exit(3)
props = units.get(sys.argv[2], {"LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead",
                                "UnitFileState": ""})
wanted = sys.argv[3].split("=", 1)[1].split(",")
for key in wanted:
    print("%s=%s" % (key, props.get(key, "")))
'''


def _read(**changes):
    """A probe's reads on a node as the role wants it."""
    read = {"packages": {"prometheus-node-exporter": "installed"}, "missing": [],
            "recorded": ["prometheus-node-exporter"], "state_dir_differences": [], "defaults_to_keep": [],
            "files": [{"path": "/etc/default/prometheus-node-exporter", "differences": []}],
            "units": {"prometheus-node-exporter": dict(AS_WANTED)}, "ready_error": ""}
    read.update(changes)
    return read


# --- decide() -------------------------------------------------------------------------------

def test_a_node_as_wanted_has_no_difference_and_nothing_to_act_on():
    decided = mp.decide(_read(), ["prometheus-node-exporter"], "/etc/laguna-spark/monitoring")
    assert decided == {"differences": [], "record": False, "to_write": [], "units_to_run": [], "ready": True}


def test_missing_packages_are_installed_and_recorded():
    decided = mp.decide(_read(missing=["prometheus-node-exporter"], recorded=[]), [], "/s")
    assert decided["differences"] == ["packages to install: prometheus-node-exporter",
                                      "/s/installed.json: to record prometheus-node-exporter"]
    assert decided["record"]
    # Already recorded (an earlier run installed it, someone removed it): installed again, not recorded again.
    again = mp.decide(_read(missing=["prometheus-node-exporter"]), [], "/s")
    assert not again["record"] and again["differences"] == ["packages to install: prometheus-node-exporter"]


def test_the_state_directory_and_the_kept_defaults():
    decided = mp.decide(_read(state_dir_differences=["missing"], defaults_to_keep=["prometheus"]), [], "/s")
    assert decided["differences"] == [
        "/s: missing", "/etc/default files of packages installed before the role, to keep: prometheus"]


def test_a_file_that_differs_is_to_write():
    files = [{"path": "/etc/default/prometheus-node-exporter", "differences": []},
             {"path": "/etc/prometheus/laguna-spark.yml", "differences": ["content differs (sha1 a, wanted b)",
                                                                          "mode 0600, wanted 0644"]}]
    decided = mp.decide(_read(files=files), [], "/s")
    assert decided["to_write"] == ["/etc/prometheus/laguna-spark.yml"]
    assert decided["differences"] == [
        "/etc/prometheus/laguna-spark.yml: content differs (sha1 a, wanted b), mode 0600, wanted 0644"]


@pytest.mark.parametrize("props, line", [
    (dict(AS_WANTED, ActiveState="inactive", SubState="dead"),
     "prometheus-node-exporter.service: ActiveState inactive (SubState dead), wanted active"),
    (dict(AS_WANTED, ActiveState="failed", SubState="failed", UnitFileState="disabled"),
     "prometheus-node-exporter.service: ActiveState failed (SubState failed), wanted active, "
     "UnitFileState disabled, wanted enabled"),
    (dict(AS_WANTED, UnitFileState="masked"), "prometheus-node-exporter.service: UnitFileState masked, wanted enabled"),
    ({"LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead", "UnitFileState": ""},
     "prometheus-node-exporter.service: LoadState not-found, wanted loaded"),
    ({"LoadState": "", "ActiveState": "", "SubState": "", "UnitFileState": ""},
     "prometheus-node-exporter.service: LoadState unknown, wanted loaded"),
])
def test_a_unit_not_running_or_not_enabled_is_to_run(props, line):
    decided = mp.decide(_read(units={"prometheus-node-exporter": props}), [], "/s")
    assert decided["units_to_run"] == ["prometheus-node-exporter"] and decided["differences"] == [line]


@pytest.mark.parametrize("props", [
    dict(AS_WANTED, ActiveState="activating", SubState="start"),   # systemd_service's started leaves it
    dict(AS_WANTED, UnitFileState="static"), dict(AS_WANTED, UnitFileState="enabled-runtime"),
    dict(AS_WANTED, UnitFileState="alias"), dict(AS_WANTED, UnitFileState="indirect"),
])
def test_what_systemd_service_leaves_alone_is_no_difference(props):
    assert mp.decide(_read(units={"prometheus": props}), [], "/s")["differences"] == []


def test_prometheus_not_ready():
    decided = mp.decide(_read(ready_error="http://127.0.0.1:9090/-/ready: HTTP Error 503"), [], "/s")
    assert not decided["ready"]
    assert decided["differences"] == ["Prometheus is not ready: http://127.0.0.1:9090/-/ready: HTTP Error 503"]


# --- The reads ------------------------------------------------------------------------------

def test_a_file_against_the_rendered_content(tmp_path):
    path = tmp_path / "prometheus-node-exporter"
    assert mp.read_file(str(path), EXPORTER_DEFAULT, "0644", USER, GROUP)["differences"] == ["missing"]
    path.write_text(EXPORTER_DEFAULT)
    path.chmod(0o644)
    same = mp.read_file(str(path), EXPORTER_DEFAULT, "0644", USER, GROUP)
    assert same["differences"] == [] and same["checksum"] == hashlib.sha1(EXPORTER_DEFAULT.encode()).hexdigest()
    assert same["mode"] == "0644" and same["owner"] == USER
    path.write_text(EXPORTER_DEFAULT.replace("127.0.0.1", "0.0.0.0"))
    path.chmod(0o600)
    changed = mp.read_file(str(path), EXPORTER_DEFAULT, "0644", USER, GROUP)
    assert changed["differences"][0].startswith("content differs (sha1 ")
    assert changed["differences"][1:] == ["mode 0600, wanted 0644"]
    other = "nobody" if USER != "nobody" else "root"
    assert mp.read_file(str(path), path.read_text(), "0600", other, GROUP)["differences"] == [
        "owner %s:%s, wanted %s:%s" % (USER, GROUP, other, GROUP)]
    (tmp_path / "dir").mkdir()
    assert mp.read_file(str(tmp_path / "dir"), "", "0644", USER, GROUP)["differences"] == ["not a regular file"]


def test_the_state_directory(tmp_path):
    state = tmp_path / "state"
    assert mp.read_dir(str(state), owner=USER, group=GROUP) == ["missing"]
    state.mkdir()
    state.chmod(0o755)
    assert mp.read_dir(str(state), owner=USER, group=GROUP) == []
    state.chmod(0o700)
    assert mp.read_dir(str(state), owner=USER, group=GROUP) == ["mode 0700, wanted 0755"]
    (tmp_path / "file").write_text("")
    assert mp.read_dir(str(tmp_path / "file"), owner=USER, group=GROUP) == ["not a directory"]


def test_defaults_to_keep_are_the_packages_installed_before_the_role_without_a_copy(tmp_path):
    packages = ["prometheus", "prometheus-node-exporter"]
    # prometheus installed before the role (not recorded, not missing), the exporter installed by it.
    assert mp.defaults_to_keep(packages, [], ["prometheus-node-exporter"], str(tmp_path)) == ["prometheus"]
    (tmp_path / "prometheus.default").write_text("ARGS=\"\"\n")
    assert mp.defaults_to_keep(packages, [], ["prometheus-node-exporter"], str(tmp_path)) == []
    # A missing package is installed by the role: nothing to keep.
    assert mp.defaults_to_keep(packages, packages, [], str(tmp_path / "none")) == []


def test_the_unit_read_asks_for_active_sub_and_unit_file_state():
    argv = mp.show_argv("systemctl", "prometheus.service")
    assert argv[:3] == ["systemctl", "show", "prometheus.service"]
    assert set(argv[3].split("=", 1)[1].split(",")) >= {"ActiveState", "SubState", "UnitFileState", "LoadState"}
    assert mp.unit_name("prometheus") == "prometheus.service" and mp.unit_name("x.socket") == "x.socket"


# --- The module on a fake node --------------------------------------------------------------

class Ready(http.server.BaseHTTPRequestHandler):
    code = 200

    def do_GET(self):  # noqa: N802  (http.server's name)
        self.send_response(self.code if self.path == "/-/ready" else 404)
        self.end_headers()
        self.wfile.write(b"Prometheus Server is Ready.\n")

    def log_message(self, *args):
        pass


class NotReady(Ready):
    code = 503


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A node as the role wants it: dpkg says installed, the units run enabled, the record and the files
    are there (owned by the user running the tests, whom the probe is told to want)."""
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o755)
    (state / "installed.json").write_text('["prometheus-node-exporter"]\n')
    exporter = tmp_path / "etc-default-prometheus-node-exporter"
    exporter.write_text(EXPORTER_DEFAULT)
    exporter.chmod(0o644)
    calls = tmp_path / "systemctl-calls"
    units = {"prometheus-node-exporter.service": AS_WANTED}
    script = tmp_path / "fake_systemctl.py"
    script.write_text(FAKE_SYSTEMCTL)
    on_path(monkeypatch, tmp_path / "bin", {
        "systemctl": python_script(script),
        "dpkg-query": "#!/bin/sh\ncase \"$4\" in prometheus-node-exporter) printf installed;; *) exit 1;; esac\n"})
    monkeypatch.setenv("FAKE_SYSTEMCTL_CALLS", str(calls))
    monkeypatch.setenv("FAKE_UNITS", json.dumps(units))
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\nexit 0\n")
    python.chmod(0o755)

    class Node:
        def args(self, **changes):
            args = {"packages": ["prometheus-node-exporter"], "path": str(tmp_path / "models"), "python": str(python),
                    "state_dir": str(state), "units": ["prometheus-node-exporter"],
                    "files": [{"path": str(exporter), "content": EXPORTER_DEFAULT, "mode": "0644", "owner": USER,
                               "group": GROUP}]}
            args.update(changes)
            return args

        def set_units(self, **props):
            monkeypatch.setenv("FAKE_UNITS", json.dumps({"prometheus-node-exporter.service": dict(AS_WANTED, **props)}))

        def systemctl_calls(self):
            return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []

    node = Node()
    node.state, node.exporter, node.tmp = state, exporter, tmp_path
    return node


def test_the_probe_on_a_node_as_wanted_reports_no_difference(node, run_module, http_server):
    url = http_server(Ready)
    result = run_module(monitoring_probe_module, node.args(ready_url=url + "/-/ready"), check_mode=True)
    assert not result.failed and not result["changed"], result
    assert result["differences"] == [] and result["to_write"] == [] and result["units_to_run"] == []
    assert result["missing"] == [] and not result["record"] and result["defaults_to_keep"] == []
    assert result["ready"] and result["units"]["prometheus-node-exporter"] == AS_WANTED
    assert result["mountpoint"] == mp.mountpoint(str(node.tmp)) and result["ray_metrics"]
    # One systemctl show per unit, with ActiveState, SubState and UnitFileState.
    calls = node.systemctl_calls()
    assert [c[:2] for c in calls] == [["show", "prometheus-node-exporter.service"]]
    assert {"ActiveState", "SubState", "UnitFileState"} <= set(calls[0][2].split("=", 1)[1].split(","))


def test_the_probe_names_every_kind_of_difference(node, run_module, http_server):
    node.exporter.write_text(EXPORTER_DEFAULT.replace("127.0.0.1", "0.0.0.0"))
    node.state.chmod(0o700)
    node.set_units(ActiveState="inactive", SubState="dead", UnitFileState="disabled")
    url = http_server(NotReady)
    result = run_module(monitoring_probe_module, node.args(
        packages=["prometheus-node-exporter", "prometheus"], units=["prometheus-node-exporter"],
        ready_url=url + "/-/ready"), check_mode=True)
    assert not result["changed"]
    assert result["missing"] == ["prometheus"] and result["record"]
    assert result["to_write"] == [str(node.exporter)] and result["units_to_run"] == ["prometheus-node-exporter"]
    assert not result["ready"] and "503" in result["ready_error"]
    lines = result["differences"]
    assert lines[:3] == ["packages to install: prometheus", "%s: mode 0700, wanted 0755" % node.state,
                         "%s/installed.json: to record prometheus" % node.state]
    assert lines[3].startswith("%s: content differs (sha1 " % node.exporter)
    assert lines[4] == ("prometheus-node-exporter.service: ActiveState inactive (SubState dead), wanted active, "
                        "UnitFileState disabled, wanted enabled")
    assert lines[5].startswith("Prometheus is not ready: %s/-/ready" % url) and len(lines) == 6
    # Nothing changed on the node.
    assert node.exporter.read_text() != EXPORTER_DEFAULT and (node.state.stat().st_mode & 0o777) == 0o700


def test_the_heads_second_read_compares_files_only(node, run_module):
    missing = node.tmp / "laguna-spark.yml"
    result = run_module(monitoring_probe_module, {"files": [
        {"path": str(missing), "content": "global: {}\n", "owner": USER, "group": GROUP},
        {"path": str(node.exporter), "content": EXPORTER_DEFAULT, "owner": USER, "group": GROUP}]})
    assert result["differences"] == ["%s: missing" % missing] and result["to_write"] == [str(missing)]
    assert result["mountpoint"] is None and result["units"] == {} and result["ready"]
    assert node.systemctl_calls() == []


def test_node_info_is_the_probes_read(node, run_module):
    """monitoring_node_info (tasks/render.yml, verify.yml) returns the probe's reads of the same things."""
    args = node.args()
    info = run_module(monitoring_node_info, {k: args[k] for k in ("packages", "path", "python", "state_dir")})
    probed = run_module(monitoring_probe_module, args)
    for key in ("missing", "recorded", "mountpoint", "python_found", "ray_metrics", "ray_metrics_error"):
        assert info[key] == probed[key], key


def test_a_bad_mode_is_refused(node, run_module):
    result = run_module(monitoring_probe_module, {"files": [{"path": "/x", "content": "", "mode": "rw"}]})
    assert result.failed and "not octal" in result["msg"]


# --- The role acts only on what the probe found ---------------------------------------------

NODE_ACTIONS = {"ansible.builtin.file", "ansible.builtin.copy", "ansible.builtin.apt", "ansible.builtin.systemd_service",
                "ansible.builtin.uri", "laguna.spark.monitoring_probe"}


def _tasks(name):
    with open(os.path.join(ROOT, "roles", "monitoring", "tasks", name)) as handle:
        return yaml.safe_load(handle)


def test_every_acting_task_is_gated_on_the_probe():
    """After the probes, every task that reaches a node is skipped on a node as wanted: its `when`
    (or its loop) names what the probe found different."""
    block = _tasks("main.yml")[0]["block"]
    probes = [t for t in block if "laguna.spark.monitoring_probe" in t]
    assert [t["register"] for t in probes] == ["monitoring_node", "monitoring_head_files"]
    assert probes[1]["when"] == "laguna_is_head"
    acting = [t for t in block if set(t) & NODE_ACTIONS and "laguna.spark.monitoring_probe" not in t]
    assert [t["name"] for t in acting] == [
        "The role's own directory", "Remember the packages this role installs",
        "Keep the /etc/default file of a package installed before", "Arguments of the node exporter",
        "Arguments of Prometheus", "Install {{ monitoring_packages | join(' and ') }}", "The alert rules",
        "Prometheus's configuration", "Run the daemons", "Prometheus is ready"]
    gates = {
        "The role's own directory": "monitoring_node.state_dir_differences",
        "Remember the packages this role installs": "monitoring_node.missing",
        "Arguments of the node exporter": "monitoring_to_write",
        "Arguments of Prometheus": "monitoring_to_write",
        "Install {{ monitoring_packages | join(' and ') }}": "monitoring_node.missing",
        "The alert rules": "monitoring_to_write",
        "Prometheus's configuration": "monitoring_to_write",
        "Prometheus is ready": "monitoring_node.ready",
    }
    loops = {"Keep the /etc/default file of a package installed before": "monitoring_node.defaults_to_keep",
             "Run the daemons": "monitoring_node.units_to_run"}
    for task in acting:
        if task["name"] in loops:
            assert loops[task["name"]] in task["loop"], task["name"]
        else:
            assert gates[task["name"]] in json.dumps(task["when"]), task["name"]
    # The handlers are notified only by the writes.
    notifying = sorted(t["name"] for t in block if "notify" in t)
    assert notifying == ["Arguments of Prometheus", "Arguments of the node exporter", "Prometheus's configuration",
                         "The alert rules"]


def test_the_rules_and_the_configuration_are_validated_by_promtool_when_written():
    block = _tasks("main.yml")[0]["block"]
    by_name = dict((t["name"], t) for t in block)
    assert by_name["The alert rules"]["ansible.builtin.copy"]["validate"] == "/usr/bin/promtool check rules %s"
    assert by_name["Prometheus's configuration"]["ansible.builtin.copy"]["validate"] == \
        "/usr/bin/promtool check config %s"
