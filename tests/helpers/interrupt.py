"""Interrupt a real ansible-playbook run the way a user does (Ctrl-C,
twice) once a process it started is running, and find what it left."""
import os
import signal
import subprocess
import sys
import time

from helpers.collection import collections_path


def processes(argv_prefix):
    """PIDs of the processes whose argv starts with ``argv_prefix``."""
    from ansible_collections.laguna.spark.plugins.module_utils import procs  # pylint: disable=import-outside-toplevel

    prefix = list(argv_prefix)
    return [pid for pid, argv in procs.argvs() if argv[:len(prefix)] == prefix]


def interrupted_role(tmp_path, role, extravars, waits_for, timeout=240):
    """Run ``role`` on localhost with ansible-playbook, SIGINT it twice once
    ``waits_for`` holds - an argv prefix (a process with it runs) or a
    callable (it returns true) - and return the run's log text."""
    play = ("- hosts: spark_head\n  gather_facts: false\n  tasks:\n"
            "    - ansible.builtin.include_role:\n        name: laguna.spark.%s\n" % role)
    if callable(waits_for):
        return interrupted_play(tmp_path, play, extravars, waits_for, timeout)
    return interrupted_play(tmp_path, play, extravars, lambda: processes(waits_for), timeout,
                            what=" ".join(waits_for))


def interrupted_play(tmp_path, play_yaml, extravars, until, timeout=240, hostvars="", what="the awaited process",
                     inventory=None):
    """Run ``play_yaml`` on localhost (group spark_head, ``hostvars`` on its
    inventory line; or on the hosts of ``inventory``, an inventory's text)
    with ansible-playbook, SIGINT it twice as soon as ``until()`` is true,
    and return the run's log text."""
    import json  # pylint: disable=import-outside-toplevel

    (tmp_path / "interrupted-vars.json").write_text(json.dumps(extravars))
    (tmp_path / "interrupted-hosts").write_text(inventory or (
        "[spark_head]\nlocalhost ansible_connection=local laguna_roce_ip=127.0.0.1 "
        "ansible_python_interpreter=%s %s\n" % (sys.executable, hostvars)))
    (tmp_path / "interrupted-play.yml").write_text(play_yaml)
    log_path = str(tmp_path / "interrupted.log")
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
            str(tmp_path / "interrupted-hosts"), str(tmp_path / "interrupted-play.yml"),
            "-e", "@%s" % (tmp_path / "interrupted-vars.json")]
    with open(log_path, "w") as log:
        play = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path(),
                                         ANSIBLE_NOCOLOR="1"))
        try:
            deadline = time.time() + timeout
            while not until():
                if time.time() > deadline or play.poll() is not None:
                    raise AssertionError("%s never ran:\n%s" % (what, open(log_path).read()[-3000:]))
                time.sleep(0.2)
            play.send_signal(signal.SIGINT)
            time.sleep(1)
            play.send_signal(signal.SIGINT)
            play.wait(60)
        finally:
            if play.poll() is None:
                play.kill()
    with open(log_path) as log:
        return log.read()
