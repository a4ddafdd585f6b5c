"""The recipe, item by item, against what the collection renders by default.

Both sides are read, not typed in: the recipe's shell blocks run with stubs
(tests/helpers/recipe.py) and the roles' render task files run for the
default inventory (tests/helpers/render.py). Every recipe value must appear
with the same value, or the "Differences from the recipe" table of
docs/differences-from-the-recipe.md must name the difference (recipe value, variable, default, why).
"""

import os

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import mirror, systemd_run
from helpers import conformance, recipe, render

ROOT = render.ROOT


def collection_systemd_run(name, command, environment, properties):
    """The systemd-run argv the collection's systemd_run_service module runs."""
    digest = systemd_run.fingerprint(command, environment, properties)
    return systemd_run.run_argv("systemd-run", name, command, environment, properties,
                                systemd_run.description("d", digest))


def collection_rsync(options, rsh):
    """The argv of one of the staging mirror's rsync streams (model_mirror module)."""
    return mirror.rsync_argv("rsync", options, rsh, "/src", "worker:/dest")


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    rendered = render.render_default_deployment(str(tmp_path_factory.mktemp("render")))
    head = rendered["hosts"][rendered["head"]]
    worker = rendered["hosts"][rendered["workers"][0]]
    text = recipe.read_recipe()
    calls, transcript = recipe.run_recipe(str(tmp_path_factory.mktemp("recipe")), head["home"],
                                          head["user"], rendered["sysfs"], text=text)
    want = conformance.recipe_items(calls, text, head["home"], head["roce_ip"], worker["roce_ip"])
    have = conformance.collection_items(rendered, collection_systemd_run, collection_rsync)
    page = os.path.join(ROOT, conformance.DIFFERENCES_PAGE)
    if not os.path.isfile(page):
        pytest.fail("%s is missing: it holds the table of differences from the recipe"
                    % conformance.DIFFERENCES_PAGE, pytrace=False)
    with open(page, encoding="utf-8") as fh:
        table = conformance.differences_table(fh.read())
    if not table:
        pytest.fail("%s has no table of differences from the recipe (a header row '| %s |' "
                    "and rows whose item is in backquotes)"
                    % (conformance.DIFFERENCES_PAGE, " | ".join(conformance.DIFFERENCES_HEADER)), pytrace=False)
    return {"want": want, "have": have, "table": table, "transcript": transcript, "calls": calls,
            "rendered": rendered}


def test_recipe_blocks_were_found_and_ran(sides):
    progs = [c["prog"] for c in sides["calls"]]
    # Both raylets, the serve, both downloads, both mirrors and the smoke test.
    assert progs.count("systemd-run") == 3, sides["transcript"]
    assert progs.count("hf") == 2 and progs.count("rsync") == 2
    assert any("capital" in " ".join(c["argv"]) for c in sides["calls"] if c["prog"] == "curl")


def test_recipe_gid_function_and_roce_gid_module_agree(sides):
    # The recipe's gid() shell function and the collection's roce_gid module
    # read the same fake sysfs trees; the worker's index differs on purpose.
    want, hosts = sides["want"], sides["rendered"]["hosts"]
    head, worker = hosts[sides["rendered"]["head"]], hosts[sides["rendered"]["workers"][0]]
    assert want["ray-head env NCCL_IB_GID_INDEX"] == str(head["gid_index"]) == "3"
    assert want["ray-worker env NCCL_IB_GID_INDEX"] == str(worker["gid_index"]) == "5"


def test_both_twins_go_to_nccl_with_a_gid_choice_right_on_each(sides):
    # Each Spark's cabled port is two PCIe x4 twins; NCCL gets both. The
    # head's twins each carry their own address, so NCCL's per-device GID
    # choice is right and no index is pinned; the worker's older address
    # would mislead it, so its choice is narrowed to the fabric's range.
    have, hosts = sides["have"], sides["rendered"]["hosts"]
    for unit in ("ray-head", "ray-worker", "vllm-serve"):
        assert have[unit + " env NCCL_IB_HCA"] == "=rocep1s0f1:1,roceP2p1s0f1:1"
    assert hosts[sides["rendered"]["head"]]["gid_policy"] == "nccl"
    assert "ray-head env NCCL_IB_GID_INDEX" not in have
    assert hosts[sides["rendered"]["workers"][0]]["gid_policy"] == "range"
    assert have["ray-worker env NCCL_IB_ADDR_RANGE"] == "192.168.100.0/23"


@pytest.mark.parametrize("prefix", ["ray-head", "ray-worker", "vllm-serve", "hf-download", "rsync",
                                    "smoke", "clean-slate"])
def test_every_recipe_item_is_rendered_or_a_documented_difference(sides, prefix):
    want = {k: v for k, v in sides["want"].items() if k.startswith(prefix + " ")}
    have = {k: v for k, v in sides["have"].items() if k.startswith(prefix + " ")}
    assert want, "no %s items found in the recipe" % prefix
    problems = conformance.compare(want, have, sides["table"])
    assert not problems, "\n".join(problems)


def test_the_table_has_no_row_for_an_unknown_item(sides):
    known = set(sides["want"]) | set(sides["have"])
    assert not sorted(set(sides["table"]) - known)
