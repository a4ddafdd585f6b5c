#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: hf_repo_manifest
short_description: What the Hugging Face Hub publishes for a repo (files, sizes, sha256)
version_added: "0.2.0"
description:
  - Resolves O(revision) of O(repo) to a commit and lists its files with
    their sizes, the sha256 of LFS files and the git blob id of the others,
    from the same endpoints C(hf download) uses
    (C(/api/models/<repo>/revision/<rev>) and C(/api/models/<repo>/tree/<commit>)).
  - The result is what M(laguna.spark.model_verify) checks a downloaded copy against.
  - Read-only; supports check mode.
attributes:
  check_mode:
    support: full
    description: Only reads from the Hub; the same result in check mode.
  platform:
    support: full
    platforms: posix
    description: Any POSIX system that can reach the Hub.
extends_documentation_fragment: [laguna.spark.attributes.no_diff, laguna.spark.hub]
options:
  repo:
    description: Repo id, as C(owner/name).
    type: str
    required: true
  revision:
    description: Branch, tag or commit.
    type: str
    default: main
author:
  - laguna-spark developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: What the Hub publishes for the target
  laguna.spark.hf_repo_manifest:
    repo: poolside/Laguna-S-2.1-FP8
  environment:
    HF_TOKEN: "{{ my_token }}"
  register: hub
"""

RETURN = r"""
repo:
  description: O(repo), as asked.
  returned: always
  type: str
  sample: poolside/Laguna-S-2.1-FP8
revision:
  description: O(revision), as asked (the fast no-op path records it with RV(commit), to see a branch move).
  returned: always
  type: str
  sample: main
commit:
  description: The commit O(revision) resolves to.
  returned: always
  type: str
files:
  description: Path to V({size, sha256, git_oid}); V(sha256) is null for regular (non-LFS) files.
  returned: always
  type: dict
total_bytes:
  description: Sum of the files' sizes.
  returned: always
  type: int
"""

from ansible_collections.laguna.spark.plugins.module_utils import model_stage
from ansible_collections.laguna.spark.plugins.module_utils.ansible_module import new_module


def main():
    module = new_module(dict(
        repo=dict(type="str", required=True),
        revision=dict(type="str", default="main"),
        endpoint=dict(type="str"),
        token=dict(type="str", no_log=True),
        timeout=dict(type="int", default=30),
    ))
    p = module.params
    endpoint, fetch = model_stage.hub_fetcher(p["endpoint"], p["token"], p["timeout"])
    try:
        commit, files = model_stage.hub_manifest(fetch, endpoint, p["repo"], p["revision"])
    except Exception as exc:  # HTTPError, URLError, ValueError: all mean "cannot tell"
        module.fail_json(msg="cannot read %s@%s from %s: %s" % (p["repo"], p["revision"], endpoint, exc))
    module.exit_json(changed=False, repo=p["repo"], revision=p["revision"], commit=commit, files=files,
                     total_bytes=sum(f["size"] for f in files.values()))


if __name__ == "__main__":
    main()
