import json
import os

from ansible_collections.laguna.spark.plugins.module_utils import ray_auth
from ansible_collections.laguna.spark.plugins.modules import ray_auth_token


def _path(tmp_path):
    return str(tmp_path / ".ray" / "auth_token")


def test_a_missing_token_is_made_private_and_kept_on_rerun(run_module, tmp_path):
    path = _path(tmp_path)
    first = run_module(ray_auth_token, {"path": path, "generation": 1})
    assert first["changed"] and first["reason"] == "missing" and first["generation"] == 1
    token = open(path).read()
    assert ray_auth.TOKEN.match(token) and first["digest"] == ray_auth.digest(token)
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert oct(os.stat(os.path.dirname(path)).st_mode & 0o777) == "0o700"
    assert token not in json.dumps(first)
    again = run_module(ray_auth_token, {"path": path, "generation": 1})
    assert not again["changed"] and open(path).read() == token


def test_a_new_generation_rotates_the_token(run_module, tmp_path):
    path = _path(tmp_path)
    first = run_module(ray_auth_token, {"path": path, "generation": 1})
    rotated = run_module(ray_auth_token, {"path": path, "generation": 2})
    assert rotated["changed"] and rotated["reason"] == "rotated (generation 1 -> 2)"
    assert rotated["digest"] != first["digest"] and ray_auth.read_generation(path) == 2
    assert not run_module(ray_auth_token, {"path": path, "generation": 2})["changed"]


def test_check_mode_and_diff_write_nothing_and_show_no_token(run_module, tmp_path):
    path = _path(tmp_path)
    result = run_module(ray_auth_token, {"path": path, "generation": 1}, check_mode=True, diff=True)
    assert result["changed"] and not os.path.exists(path)
    run_module(ray_auth_token, {"path": path, "generation": 1})
    token = open(path).read()
    result = run_module(ray_auth_token, {"path": path, "generation": 2}, check_mode=True, diff=True)
    assert result["changed"] and open(path).read() == token
    assert "sha256 %s generation 1" % ray_auth.digest(token) in result["diff"]["before"]
    assert token not in json.dumps(result)


def test_a_worker_gets_exactly_the_heads_token(run_module, tmp_path):
    head, worker = _path(tmp_path / "head"), _path(tmp_path / "worker")
    run_module(ray_auth_token, {"path": head, "generation": 1})
    read = run_module(ray_auth_token, {"path": head, "state": "read", "return_token": True})
    installed = run_module(ray_auth_token, {"path": worker, "token": read["token"]})
    assert installed["changed"] and open(worker).read() == open(head).read()
    assert read["token"] not in json.dumps(installed)
    assert not run_module(ray_auth_token, {"path": worker, "token": read["token"]})["changed"]
    os.chmod(worker, 0o644)
    fixed = run_module(ray_auth_token, {"path": worker, "token": read["token"]})
    assert fixed["changed"] and fixed["reason"] == "mode 0644" and os.stat(worker).st_mode & 0o777 == 0o600


def test_reading_returns_the_token_only_when_asked_and_fails_without_one(run_module, tmp_path):
    path = _path(tmp_path)
    assert "no Ray token" in run_module(ray_auth_token, {"path": path, "state": "read"})["msg"]
    run_module(ray_auth_token, {"path": path})
    assert "token" not in run_module(ray_auth_token, {"path": path, "state": "read"})


def test_a_token_that_ray_would_read_otherwise_is_refused(run_module, tmp_path):
    result = run_module(ray_auth_token, {"path": _path(tmp_path), "token": "has spaces in it, sixteen+"})
    assert result.failed and "printable" in result["msg"]
