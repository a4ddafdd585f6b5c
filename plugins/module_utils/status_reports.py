# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The read-only reports of the staging, ray_cluster and vllm_serve roles
(facts staging_report, ray_cluster_report, vllm_serve_report), built from what
their status tasks read, and of the linger and vllm_patch roles (facts
linger_report, vllm_patch_report). Pure functions: the module status_report
calls the first three (on the controller), the user_linger module the linger
one (on the node, module_utils/linger.py), the filter vllm_patch_report the
last (on the controller, from the result its status task has), and the unit
tests test them."""

from __future__ import annotations


def _gb(value):
    return round(float(value or 0) / 1e9, 2)


def _count(value):
    """A count as the inventory wrote it: 2, not 2.0."""
    value = float(value)
    return int(value) if value.is_integer() else value


def _differences(mine, theirs, limit=5):
    """How manifest ``mine`` differs from ``theirs`` (path -> size), naming files."""
    def names(paths):
        return ", ".join(paths[:limit]) + (" and %d more" % (len(paths) - limit) if len(paths) > limit else "")
    missing = sorted(set(theirs) - set(mine))
    only = sorted(set(mine) - set(theirs))
    differ = sorted(f for f in theirs if f in mine and mine[f] != theirs[f])
    parts = []
    if missing:
        parts.append(names(missing) + " missing here")
    if only:
        parts.append(names(only) + " only here")
    if differ:
        parts.append(names(differ) + " not the same")
    return ", ".join(parts)


def staging(scans, head_scans=None, is_head=True, head_host=""):
    """``scans``: one model_stage_info result per checkpoint (with ``item``:
    the staging_artifacts entry); ``head_scans``: the head's, in the same
    order, on a worker. A worker's copy must also equal the head's, file for
    file (the files each node's recorded file list names, when it has one);
    the files that differ are named."""
    artifacts = []
    head_scans = head_scans or []
    for index, result in enumerate(scans):
        item = result.get("item") or {}
        problems = list(result.get("problems") or [])
        if not is_head:
            head = head_scans[index] if index < len(head_scans) else {}
            differences = _differences(result.get("manifest") or {}, head.get("manifest") or {})
            if differences or not head:
                problems.append("differs from %s's copy%s" % (head_host, ": " + differences if differences else ""))
        complete = bool(result.get("complete")) and not problems
        summary = "%s: %s shard(s), %s GB" % (
            item.get("name"), result.get("shard_count", 0), _gb(result.get("total_bytes")))
        if not complete:
            summary += " (%s)" % "; ".join(problems)
        shadow = {s.get("path") for s in result.get("shadowing") or []}
        others = [rel for rel in result.get("extra") or [] if rel not in shadow]
        if others:
            summary += "; %d file(s) outside its file list, left alone: %s" % (len(others), ", ".join(others[:5]))
        artifacts.append({"name": item.get("name"), "path": item.get("path"),
                          "shards": result.get("shard_count", 0), "bytes": result.get("total_bytes", 0),
                          "complete": complete, "problems": problems, "summary": summary,
                          "extra": list(result.get("extra") or [])})
    bad = [a for a in artifacts if not a["complete"]]
    return {"ok": not bad, "artifacts": artifacts, "problems": [a["summary"] for a in bad]}


def gone(units, persistent, tags="ray_cluster,vllm_serve"):
    """The sentence for units that are not loaded at all (``units``: "unit on
    host" strings): transient units vanish with a node restart, a teardown, a
    stop or an exit with status 0; persistent ones only when their file is gone."""
    if not units:
        return []
    if persistent:
        return ["%s: no unit file is loaded (laguna_persistent_units is on). Run "
                "`ansible-playbook site.yml --tags %s` to install and start it again." % (", ".join(units), tags)]
    return ["%s: gone (not loaded). The services are transient units (laguna_persistent_units: false), which do "
            "not outlive a restart of the node, a teardown, a stop or a clean exit (vLLM exits with status 0 when "
            "one of its Ray workers dies, as with a raylet's crash), and systemd does not restart. Bring them back with "
            "`ansible-playbook site.yml --tags %s`, or set laguna_persistent_units: true so that they come back "
            "by themselves after a restart." % (", ".join(units), tags)]


def ray_cluster(nodes, status, expected_nodes, expected_gpus, address, gid_index=None, persistent=False):
    """``nodes``: this play's raylets ({host, unit, state, result, linger});
    nodes outside the play (--limit) are judged by ``status`` (a ray_status
    result) alone."""
    status = status or {}
    seen = int(status.get("node_count") or 0)
    gpus = float(status.get("gpus_total") or 0.0)
    bad = [n for n in nodes if n.get("state") != "active"]
    short = seen < int(expected_nodes) or gpus < float(expected_gpus)
    problems = []
    if short or bad:
        problems.append("ray status at %s shows %d of %s node(s) and %s of %s GPU(s)%s." % (
            address, seen, expected_nodes, gpus, _count(expected_gpus),
            "" if status.get("reachable") else " (head unreachable)"))
        for node in nodes:
            state = node.get("state")
            problems.append("%s: %s is %s%s, Linger=%s." % (
                node.get("host"), node.get("unit"), state,
                "" if state == "active" else " (%s)" % node.get("result"), node.get("linger")))
        no_linger = [n.get("host") for n in nodes if n.get("linger") != "yes"]
        if no_linger:
            problems.append(
                "Linger is off on %s: the raylet dies when the SSH session ends and vLLM hangs in "
                "\"Waiting for creating a placement group\". Run --tags linger." % ", ".join(no_linger))
        missing = ["%s on %s" % (n.get("unit"), n.get("host")) for n in bad if n.get("loaded") is False]
        problems.extend(gone(missing, persistent))
        if bad:
            problems.append(
                "Inactive raylet service on %s: see `journalctl --user -u <unit>` there; check "
                "VLLM_HOST_IP/laguna_roce_ip, NCCL/GLOO_SOCKET_IFNAME and that %s is reachable from it. "
                "Rerun --tags ray_cluster to restart it." % (", ".join(n.get("host") for n in bad), address))
    return {"ok": not problems, "nodes": list(nodes), "node_count": seen, "gpus_total": gpus,
            "pending_demands": list(status.get("pending_demands") or []), "gid_index": gid_index,
            "problems": problems,
            "summary": "ray status: %d node(s), %s GPU(s) at %s" % (seen, gpus, address)}


def vllm_serve(unit_name, unit_state, url, served_model_name, models=None, speculative=False, spec=None,
               unit_loaded=True, persistent=False, host=""):
    """``models``: the /v1/models response (uri result: status, json) or None;
    ``spec``: a vllm_spec_decode_info result."""
    models = models or {}
    spec = (spec or {}) if speculative else {}
    up = models.get("status", -1) == 200
    names = [m.get("id") for m in ((models.get("json") or {}).get("data") or [])]
    problems = []
    if not unit_loaded:
        problems.extend(gone(["%s on %s" % (unit_name, host) if host else unit_name], persistent))
    elif unit_state != "active":
        problems.append("%s is %s" % (unit_name, unit_state))
    if not up:
        problems.append("%s/v1/models does not answer" % url)
    elif served_model_name not in names:
        problems.append("serving %s, not %s" % (", ".join(names), served_model_name))
    if speculative and up and (spec.get("draft_tokens") or 0) > 0 and (spec.get("accepted_tokens") or 0) == 0:
        problems.append("spec-decode acceptance is 0: the draft does not match the target precision")
    return {"ok": not problems, "unit": unit_state, "models": names, "url": url,
            "draft_tokens": spec.get("draft_tokens"), "accepted_tokens": spec.get("accepted_tokens"),
            "acceptance_rate": spec.get("acceptance_rate"), "problems": problems}


def linger(rc, stdout, stderr, user):
    """linger_report from `loginctl show-user <user> --property=Linger --value`: {ok, linger, problems}.

    ``linger`` is what loginctl says (yes/no), or "unknown (<its error>)" when
    it failed; lingering is on only on a "yes".
    """
    said = (stdout or "").strip()
    ok = rc == 0 and said == "yes"
    return {"ok": ok,
            "linger": said if rc == 0 else "unknown (%s)" % (stderr or "").strip(),
            "problems": [] if ok else ["Linger is not enabled for %s" % user]}


NOT_PATCHED = "laguna_dflash.py is not patched (run --tags vllm_patch)"


def vllm_patch(result):
    """vllm_patch_report from a check-mode laguna_dflash_patch result: {ok, path, problems}.

    Guarded (patch_state already_patched) is ok; anything else is a problem,
    the module's own message when it has one.
    """
    result = result or {}
    ok = result.get("patch_state") == "already_patched"
    return {"ok": ok, "path": result.get("path", ""),
            "problems": [] if ok else [result.get("msg", NOT_PATCHED)]}


# The options of laguna.spark.status_report (documented in its module), which
# both the module and its action plugin (the controller, no node call) check
# the task's arguments against before build() judges them.
ARGUMENT_SPEC = dict(
    kind=dict(type="str", required=True, choices=["staging", "ray_cluster", "vllm_serve"]),
    scans=dict(type="list", elements="dict", default=[]),
    head_scans=dict(type="list", elements="dict", default=[]),
    is_head=dict(type="bool", default=True),
    head_host=dict(type="str", default=""),
    nodes=dict(type="list", elements="dict", default=[]),
    ray_status=dict(type="dict", default={}),
    expected_nodes=dict(type="int", default=1),
    expected_gpus=dict(type="float", default=1),
    address=dict(type="str", default=""),
    gid_index=dict(type="raw"),
    unit=dict(type="str", default=""),
    unit_state=dict(type="str", default=""),
    served_model_name=dict(type="str", default=""),
    models=dict(type="dict", default={}),
    speculative=dict(type="bool", default=False),
    spec=dict(type="dict", default={}),
    unit_loaded=dict(type="bool", default=True),
    persistent=dict(type="bool", default=False),
)


def build(params):
    """The report of ``params['kind']`` from status_report's checked arguments."""
    kind = params["kind"]
    if kind == "staging":
        return staging(params["scans"], params["head_scans"], params["is_head"], params["head_host"])
    if kind == "ray_cluster":
        return ray_cluster(params["nodes"], params["ray_status"], params["expected_nodes"], params["expected_gpus"],
                           params["address"], params["gid_index"], params["persistent"])
    return vllm_serve(params["unit"], params["unit_state"], params["address"], params["served_model_name"],
                      params["models"], params["speculative"], params["spec"], params["unit_loaded"],
                      params["persistent"], params["head_host"])
