# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""What a node reads of the other nodes of the play (their facts, through
hostvars), and the check that they got that far.

Pure functions on plain data: the controller plugins (action peers_reached,
filter fabric_nodes, and the filters that read every host's variables
through ``host_vars``) pass them the play's host lists and a way to read a
host's variables, and the unit tests call them directly.
"""

from __future__ import annotations

from collections.abc import Mapping


def _join(names):
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _has(facts_of, host, name):
    try:
        return name in facts_of(host)
    except KeyError:
        return False


def host_vars(hosts, hostvars, error=ValueError, name="", what="the input"):
    """The (host, variables) of each inventory host of ``hosts``, read from
    ``hostvars``, the one way the filters read the hosts they are given.

    ``hosts`` is checked at once; each host when its turn comes (a generator:
    whatever the caller checks of one host comes before the next is read).
    A problem raises ``error`` (the filters pass AnsibleFilterError) with a
    message that starts with ``name`` (the filter's): ``hosts`` (``what``) is
    not a list of host names, a host is not in the inventory, or its
    variables are not a mapping."""
    prefix = name + ": " if name else ""
    if isinstance(hosts, (str, bytes)) or not hasattr(hosts, "__iter__"):
        raise error("%s%s must be a list of inventory host names" % (prefix, what))

    def each(hosts):
        for host in hosts:
            try:
                found = hostvars[host]
            except KeyError:
                raise error("%s%s is not in the inventory" % (prefix, host))
            if not isinstance(found, Mapping):
                raise error("%sthe hostvars of %s are not a mapping" % (prefix, host))
            yield host, found

    return each(hosts)


def unready(me, hosts, facts_of, play_hosts, play_hosts_all, role, facts=()):
    """'' when every host of ``hosts`` (but ``me``) that is in this play
    (``play_hosts_all``) is still in it (``play_hosts``: it has not failed and
    is reachable) and has each variable of ``facts``; else one sentence naming
    the host(s) that failed first (or that did not get that far), what
    ``role`` on ``me`` needed of them, and the fix. ``facts_of(host)`` returns
    the host's variables (a mapping) or raises KeyError. Hosts outside the
    play (``--limit``) are not checked."""
    others = [h for h in hosts if h != me and h in play_hosts_all]
    failed = [h for h in others if h not in play_hosts]
    needs = " (it needs %s's %s)" % (_join(failed), ", ".join(facts)) if facts and failed else ""
    if failed:
        return ("%s failed earlier in this run (%s above), so %s on %s stops here%s: fix what failed on %s "
                "and rerun." % (_join(failed), "its error is" if len(failed) == 1 else "their errors are",
                                role, me, needs, _join(failed)))
    short = [(h, [f for f in facts if not _has(facts_of, h, f)]) for h in others]
    short = [(h, missing) for h, missing in short if missing]
    if short:
        return ("%s did not get that far in this run (no %s), so %s on %s stops here: run every node through "
                "the roles before %s (no --tags or condition that skips them on %s), then rerun." % (
                    _join([h for h, _missing in short]),
                    "; ".join("%s on %s" % (", ".join(m), h) for h, m in short),
                    role, me, role, _join([h for h, _missing in short])))
    return ""


def fabric_nodes(facts_of, head, workers, play_hosts_all, fact="fabric_facts"):
    """The network_gate role's view of the fabric: ``nodes`` (the cluster's
    hosts in this play), ``head`` and ``workers`` (each ``{'host': name}``
    and the node's ``fact``; workers outside the play left out), ``fake``
    (the nodes whose fabric is a fake sysfs tree: ``hardware`` false).
    Raises ValueError naming a host without ``fact``."""
    def node(host):
        try:
            facts = facts_of(host)
            value = facts[fact]
        except KeyError:
            raise ValueError("%s has no %s (did the fabric discovery run on it?)" % (host, fact))
        if not hasattr(value, "items"):
            raise ValueError("%s's %s is not a mapping" % (host, fact))
        return dict({"host": host}, **dict(value.items()))

    nodes = [h for h in [head] + list(workers) if h in play_hosts_all]
    fake = [h for h in nodes if not node(h).get("hardware")]
    return {"nodes": nodes, "head": node(head),
            "workers": [node(h) for h in workers if h in play_hosts_all], "fake": fake}
