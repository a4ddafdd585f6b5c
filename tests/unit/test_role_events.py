"""The fault suite's count of module calls per role and node: the tests'
callback (tests/helpers/callbacks/task_events.py) on a real ansible-playbook
run, read by tests/helpers/role_events.py."""
import os
import subprocess
import sys
import textwrap

from helpers import role_events

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import noop_ratio  # noqa: E402  pylint: disable=wrong-import-position

ROLE_TASKS = """
- name: A module that reaches the node
  ansible.builtin.command: "true"
  changed_when: false
- name: On the controller only
  ansible.builtin.debug:
    msg: nothing
- name: Delegated to the controller
  ansible.builtin.command: "true"
  delegate_to: localhost
  changed_when: false
- name: A loop, one call per item
  ansible.builtin.command: "echo {{ item }}"
  loop: [1, 2, 3]
  changed_when: false
- name: Skipped
  ansible.builtin.command: "false"
  when: false
"""


def test_the_callback_counts_the_calls_that_reached_each_node(tmp_path):
    os.makedirs(tmp_path / "roles" / "probe_role" / "tasks")
    (tmp_path / "roles" / "probe_role" / "tasks" / "main.yml").write_text(ROLE_TASKS)
    (tmp_path / "site.yml").write_text(textwrap.dedent("""
        - name: Two nodes
          hosts: nodes
          gather_facts: false
          roles: [probe_role]
          tasks:
            - name: Outside any role
              ansible.builtin.command: "true"
              changed_when: false
        """))
    (tmp_path / "hosts").write_text("[nodes]\nnode-a\nnode-b\n[nodes:vars]\nansible_connection=local\n"
                                    "ansible_python_interpreter=%s\n" % sys.executable)
    events = tmp_path / "events.jsonl"
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(tmp_path / "hosts"),
         str(tmp_path / "site.yml")],
        capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path,
        env=dict(os.environ, **noop_ratio.task_events_env(str(events))))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    read = role_events.read(str(events))
    # The command, and the loop's three items; not the debug, the delegated
    # task, the skipped one or the play's own task.
    assert role_events.node_calls(read) == {"node-a": {"probe_role": 4}, "node-b": {"probe_role": 4}}
    assert role_events.node_tasks(read, "probe_role", host="node-a", field="task") == [
        "A module that reaches the node", "A loop, one call per item"]


def test_no_events_file_is_no_calls(tmp_path):
    assert role_events.node_calls(role_events.read(str(tmp_path / "missing.jsonl"))) == {}


def test_a_failed_call_counts_and_a_skipped_one_does_not():
    def event(kind, role="r", host="h", action="ansible.builtin.command", **data):
        return {"event": kind, "event_data": dict(role=role, host=host, resolved_action=action, **data)}
    events = [event("runner_on_failed"), event("runner_on_skipped"), event("runner_on_ok", action="set_fact"),
              event("runner_on_ok", role=None), event("runner_on_ok", delegated_to="127.0.0.1"),
              event("runner_on_ok", items=0)]
    assert role_events.node_calls(events) == {"h": {"r": 2}}
