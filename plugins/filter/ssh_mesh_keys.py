# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""ssh_mesh_keys: the public keys of a node that the ssh_mesh role read (M(ansible.builtin.slurp))."""

from __future__ import annotations

import binascii
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible.plugins.filter.core import b64decode


def _text(read):
    """The key as Ansible's b64decode and trim filters give it."""
    try:
        return b64decode(read["content"]).strip()
    except (binascii.Error, TypeError) as exc:
        raise AnsibleFilterError("ssh_mesh_keys: a read key is not base64: %s" % exc)


def ssh_mesh_keys(user_key, host_keys):
    """{pubkey, hostkeys}: the service user's key ("" when it was not read) and each host key read."""
    if not isinstance(user_key, Mapping):
        raise AnsibleFilterError("ssh_mesh_keys: the input must be the slurp result of the user's public key")
    if isinstance(host_keys, (str, bytes, Mapping)) or not hasattr(host_keys, "__iter__") \
            or not all(isinstance(read, Mapping) for read in host_keys):
        raise AnsibleFilterError("ssh_mesh_keys: host_keys must be the results of the slurp loop over the host keys")
    return {"pubkey": _text(user_key) if "content" in user_key else "",
            "hostkeys": [_text(read) for read in host_keys if "content" in read]}


class FilterModule(object):
    def filters(self):
        return {"ssh_mesh_keys": ssh_mesh_keys}
