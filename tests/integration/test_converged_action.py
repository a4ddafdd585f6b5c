"""The controller side of laguna.spark.converged (its action plugin): what
a run was asked to do. Here, not in tests/unit: importing an action plugin
loads ansible-core's controller code, after which AnsibleModule's warnings
come back empty to the in-process unit tests."""
from ansible_collections.laguna.spark.plugins.action import converged as action


class _Templar:
    """template() as the action plugin calls it; a value naming a later fact raises."""

    def template(self, value):
        if isinstance(value, str) and "fabric_facts" in value:
            raise ValueError("'fabric_facts' is undefined")
        return value.replace("{{ laguna_user }}", "spark") if isinstance(value, str) else value


def test_the_action_gathers_every_prefixed_variable_and_nothing_of_its_own(tmp_path):
    task_vars = {
        "laguna_user": "spark", "laguna_venv": "/home/{{ laguna_user }}/venvs/vllm-025",
        "vllm_serve_num_speculative_tokens": 6, "network_gate_hcas": "{{ fabric_facts.hcas }}",
        "laguna_converged": {"converged": True}, "laguna_fast_noop": True, "ansible_host": "10.0.0.1",
        "unrelated": "x", "inventory_hostname": "head", "ansible_play_hosts_all": ["head", "worker"],
        "groups": {"spark_head": ["head"], "spark_workers": ["worker"]},
    }
    inputs = action.inputs_of(task_vars, _Templar())
    assert inputs["variables"] == {"laguna_user": "spark", "laguna_venv": "/home/spark/venvs/vllm-025",
                                   "vllm_serve_num_speculative_tokens": 6, "network_gate_hcas": "unresolved"}
    assert inputs["host"] == "head" and inputs["hosts"] == ["head", "worker"]
    assert inputs["connection"][0] == "10.0.0.1"
    assert inputs["groups"] == {"spark_head": ["head"], "spark_workers": ["worker"]}


def test_the_collection_digest_follows_files_json(tmp_path):
    (tmp_path / "roles").mkdir()
    (tmp_path / "roles" / "main.yml").write_text("a")
    walked = action.collection_digest(str(tmp_path))
    (tmp_path / "roles" / "main.yml").write_text("b")
    assert action.collection_digest(str(tmp_path)) != walked
    (tmp_path / "FILES.json").write_text('{"files": []}')
    listed = action.collection_digest(str(tmp_path))
    (tmp_path / "roles" / "main.yml").write_text("c")
    assert action.collection_digest(str(tmp_path)) == listed
    (tmp_path / "FILES.json").write_text('{"files": [1]}')
    assert action.collection_digest(str(tmp_path)) != listed
