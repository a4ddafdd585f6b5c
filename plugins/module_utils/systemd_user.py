# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""`systemctl --user` for modules: read a user unit's state, start/stop/restart it.

Shared by the systemd_user_unit and systemd_run_service modules. Everything
goes through ``module.run_command`` with the user manager's environment
(XDG_RUNTIME_DIR and the session bus), so a module run as the service user
(``become_user``) talks to that user's manager.
"""

from __future__ import annotations

import os
import re

# What a report holds unless more is asked for.
DEFAULT_PROPERTIES = ("LoadState", "ActiveState", "SubState", "Result", "MainPID",
                      "ExecMainStatus", "Description", "Environment")
RUNNING_STATES = ("active", "activating", "reloading")
UNIT_SUFFIXES = (".service", ".socket", ".target", ".timer", ".path", ".mount", ".scope", ".slice")


def unit_name(name):
    """``name`` with ``.service`` appended unless it already names a unit type."""
    return name if name.endswith(UNIT_SUFFIXES) else name + ".service"


def user_env(runtime_dir=None, uid=None):
    """Environment that points systemctl at the user's manager."""
    runtime = runtime_dir or "/run/user/%d" % (os.getuid() if uid is None else uid)
    return {"XDG_RUNTIME_DIR": runtime, "DBUS_SESSION_BUS_ADDRESS": "unix:path=%s/bus" % runtime}


def parse_show(text):
    """`systemctl show` output (``Key=value`` lines) to a dict."""
    values = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key] = value
    return values


def split_words(value):
    """Words of a ``systemctl show`` string-list property, unquoted.

    systemctl prints each string with systemd's ``shell_maybe_quote()``
    (src/basic/escape.c): a string with whitespace, control or shell
    characters is put in double quotes, with a backslash before ``\\``,
    ``"``, a backtick and ``$``, and control characters C-escaped (``\\t``,
    ``\\n``, ``\\ooo``); the strings are joined by single spaces. (shlex
    keeps the backslash of ``\\$`` and ``\\t``.)
    """
    words, word, started, quoted = [], [], False, False
    text = value or ""
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            if quoted:
                unescaped, i = _unescape(text, i + 1)
                word.append(unescaped)
            else:
                word.append(text[i + 1])
                i += 2
            started = True
            continue
        if char == '"':
            quoted, started = not quoted, True
        elif char in " \t\n" and not quoted:
            if started:
                words.append("".join(word))
            word, started = [], False
        else:
            word.append(char)
            started = True
        i += 1
    if started:
        words.append("".join(word))
    return words


_C_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def _unescape(text, i):
    """(character, next index) of the escape sequence whose letter is at ``text[i]``."""
    char = text[i]
    if char in _C_ESCAPES:
        return _C_ESCAPES[char], i + 1
    octal = text[i:i + 3]
    if len(octal) == 3 and all(c in "01234567" for c in octal):
        return chr(int(octal, 8)), i + 3
    hexa = text[i + 1:i + 3]
    if char == "x" and len(hexa) == 2 and all(c in "0123456789abcdefABCDEF" for c in hexa):
        return chr(int(hexa, 16)), i + 3
    return char, i + 1  # \\ \" \` \$ \' and anything else: the character itself


def parse_environment(value):
    """The ``Environment=`` property (``A=1 "B=two words" "C=\\$HOME"``) to a dict."""
    env = {}
    for word in split_words(value):
        key, sep, val = word.partition("=")
        if sep:
            env[key] = val
    return env


def parse_exec_argv(value, like=None):
    """The argv list of an ``ExecStart=`` property as ``systemctl show`` prints it.

    systemctl (src/systemctl/systemctl-show.c, print_property) prints each
    command as ``{ path=P ; argv[]=A ; ignore_errors=no ; start_time=[...] ;
    stop_time=[...] ; pid=N ; code=... ; status=... }`` (``flags=`` instead of
    ``ignore_errors=`` for ExecStartEx), where A is ``strv_join(argv, " ")``:
    the arguments joined by single spaces, neither quoted nor escaped. So the
    split is exact unless an argument holds a space; ``like`` (the argv that
    is expected) resolves that: where the text continues with the next
    expected argument followed by a space or the end, that argument is taken
    whole. An empty value (no such unit, or no command) gives ``[]``.
    """
    text = (value or "").strip()
    if not text:
        return []
    start = text.find("argv[]=")
    if start < 0:
        return text.split()  # not systemd's format: plain words
    start += len("argv[]=")
    # The last mark ends argv: an argument may hold " ; ", the fields after it cannot.
    end = max(text.rfind(mark) for mark in (" ; ignore_errors=", " ; flags="))
    if end >= start:
        text = text[start:end]
    else:
        text = text[start:].rstrip("}").rstrip()
        if text.endswith(" ;"):
            text = text[:-2]
    return split_argv(text, like)


def split_argv(text, like=None):
    """Arguments joined by single spaces, split again; see parse_exec_argv for ``like``.

    The expected arguments are taken in order while the text has them; after
    the first that differs, an expected argument that holds a space is still
    taken whole wherever the text has it (an argument added or removed before
    it shifts it), and the rest splits on spaces.
    """
    if not text:
        return []
    like = [str(arg) for arg in like or ()]
    words, pos = [], 0
    for want in like:
        if not _starts_word(text, want, pos):
            break
        words.append(want)
        if pos + len(want) == len(text):
            return words
        pos += len(want) + 1
    spaced = sorted((arg for arg in like if " " in arg), key=len, reverse=True)
    while True:
        word = next((arg for arg in spaced if _starts_word(text, arg, pos)), None)
        if word is None:
            end = text.find(" ", pos)
            word = text[pos:] if end < 0 else text[pos:end]
        words.append(word)
        pos += len(word)
        if pos >= len(text):
            return words
        pos += 1  # the space; a trailing one leaves an empty last argument
        if pos == len(text):
            words.append("")
            return words


def _starts_word(text, word, pos):
    """Whether ``text`` holds ``word`` at ``pos``, followed by a space or the end."""
    end = pos + len(word)
    return text.startswith(word, pos) and (end == len(text) or text[end] == " ")


_SIZE_FACTORS = (("E", 1024 ** 6), ("P", 1024 ** 5), ("T", 1024 ** 4), ("G", 1024 ** 3),
                 ("M", 1024 ** 2), ("K", 1024), ("B", 1), ("", 1))
_WHITESPACE = " \t\n\r"
_SIZE_TERM = re.compile(r"[ \t\n\r]*(\d+)(?:\.(\d*))?[ \t\n\r]*")


def size_bytes(value):
    """A size as systemd parses it (parse_size() with base 1024, src/basic/parse-util.c).

    ``98G`` -> 105226698752; suffixes K M G T P E (powers of 1024) and B,
    decimals (``1.5G``) and sums in falling order (``1G 512M``); ``infinity``
    stays ``"infinity"``. Raises ValueError for anything else (a percentage,
    a negative number).
    """
    if isinstance(value, bool):
        raise ValueError("not a size: %r" % (value,))
    if isinstance(value, int):
        if value < 0:
            raise ValueError("negative size: %r" % (value,))
        return value
    text = str(value).strip(_WHITESPACE)
    if text == "infinity":
        return "infinity"
    if not text:
        raise ValueError("empty size")
    total, pos, first_suffix = 0, 0, 0
    while True:
        match = _SIZE_TERM.match(text, pos)
        if not match:
            raise ValueError("not a size: %r" % (value,))
        whole, frac = int(match.group(1)), match.group(2)
        pos = match.end()
        # Each suffix at most once, larger before smaller, as systemd wants them.
        index = next((i for i in range(first_suffix, len(_SIZE_FACTORS))
                      if text.startswith(_SIZE_FACTORS[i][0], pos)), None)
        if index is None:
            raise ValueError("not a size: %r" % (value,))
        suffix, factor = _SIZE_FACTORS[index]
        fraction = float(int(frac)) if frac else 0.0
        for dummy in frac or "":
            fraction /= 10  # as systemd computes it, so the rounding agrees
        total += whole * factor + int(fraction * factor)
        pos += len(suffix)
        first_suffix = index + 1
        if pos >= len(text):
            break
    if total >= 2 ** 64:
        raise ValueError("size out of range: %r" % (value,))
    return total


def human_size(value):
    """Bytes in the largest 1024-based unit that divides them (105226698752 -> 98G)."""
    try:
        size = size_bytes(value)
    except ValueError:
        return str(value)
    if size == "infinity" or size == 0:
        return str(size)
    for suffix, factor in _SIZE_FACTORS[:6]:
        if size % factor == 0:
            return "%d%s" % (size // factor, suffix)
    return str(size)


# Settings that `systemctl show` names otherwise: TimeoutStopSec=20 shows as
# TimeoutStopUSec=20s.
SHOW_NAMES = {"TimeoutStopSec": "TimeoutStopUSec", "TimeoutStartSec": "TimeoutStartUSec",
              "RestartSec": "RestartUSec", "RuntimeMaxSec": "RuntimeMaxUSec"}
_SPAN_UNITS = (("usec", 1), ("us", 1), ("msec", 1000), ("ms", 1000), ("seconds", 10 ** 6), ("second", 10 ** 6),
               ("sec", 10 ** 6), ("s", 10 ** 6), ("minutes", 60 * 10 ** 6), ("minute", 60 * 10 ** 6),
               ("min", 60 * 10 ** 6), ("m", 60 * 10 ** 6), ("hours", 3600 * 10 ** 6), ("hour", 3600 * 10 ** 6),
               ("hr", 3600 * 10 ** 6), ("h", 3600 * 10 ** 6), ("days", 86400 * 10 ** 6), ("day", 86400 * 10 ** 6),
               ("d", 86400 * 10 ** 6), ("weeks", 604800 * 10 ** 6), ("week", 604800 * 10 ** 6),
               ("w", 604800 * 10 ** 6))
_SPAN_TERM = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)")


def show_name(name):
    """The name `systemctl show` reports setting ``name`` under."""
    return SHOW_NAMES.get(name, name)


def timespan_usec(value):
    """A time span as systemd reads it (a bare number is seconds; ``1min 30s``), in microseconds;
    ``infinity`` stays ``"infinity"``. Raises ValueError for anything else."""
    text = str(value).strip().lower()
    if text == "infinity":
        return text
    total, pos = 0, 0
    while pos < len(text):
        match = _SPAN_TERM.match(text, pos)
        if not match or match.end() == pos:
            raise ValueError("not a time span: %r" % (value,))
        factor = dict(_SPAN_UNITS).get(match.group(2) or "s")
        if factor is None:
            raise ValueError("not a time span: %r" % (value,))
        total += int(round(float(match.group(1)) * factor))
        pos = match.end()
    if not text:
        raise ValueError("not a time span: %r" % (value,))
    return total


def is_size_property(name):
    """Whether systemd reports ``name`` in bytes (or infinity): Memory* and Limit* properties."""
    return name.startswith(("Memory", "Limit"))


def _as_text(value):
    """How a wanted value reads in a unit (systemd_run_service passes str(value))."""
    return "" if value is None else str(value)


_BOOLEANS = {"1": True, "yes": True, "y": True, "true": True, "t": True, "on": True,
             "0": False, "no": False, "n": False, "false": False, "f": False, "off": False}


def same_property(name, want, have):
    """Whether property ``name`` as systemd shows it (``have``) is what was asked for (``want``).

    Memory*/Limit* sizes compare in bytes (98G equals 105226698752, infinity
    equals infinity; ``soft:hard`` of a Limit compares the hard part, which
    systemd shows); booleans compare as systemd parses them (True equals
    yes); anything else compares as text.
    """
    want_text, have_text = _as_text(want).strip(), _as_text(have).strip()
    if want_text == have_text:
        return True
    if is_size_property(name):
        hard = want_text.rsplit(":", 1)[-1] if name.startswith("Limit") else want_text
        try:
            return size_bytes(hard) == size_bytes(have_text)
        except ValueError:
            pass  # not a size (MemoryAccounting=yes, MemoryMax=80%): as below
    if name in SHOW_NAMES:
        try:
            return timespan_usec(want_text) == timespan_usec(have_text)
        except ValueError:
            return False
    if isinstance(want, bool) or want_text.lower() in _BOOLEANS:
        return (_BOOLEANS.get(have_text.lower()) is not None
                and _BOOLEANS.get(want_text.lower()) == _BOOLEANS.get(have_text.lower()))
    return False


def _difference(what, name, want, have):
    return {"what": what, "name": name, "want": _as_text(want), "have": _as_text(have)}


def command_drift(want, have):
    """Differences between two argv lists: the first differing position, and the length."""
    want = [_as_text(arg) for arg in want]
    found = []
    for index in range(max(len(want), len(have))):
        wanted = want[index] if index < len(want) else ""
        found_arg = have[index] if index < len(have) else ""
        if index >= len(want) or index >= len(have) or wanted != found_arg:
            found.append(_difference("command", "argv[%d]" % index, wanted, found_arg))
            break
    if len(want) != len(have):
        found.append(_difference("command", "argc", len(want), len(have)))
    return found


def environment_drift(want, have):
    """Every wanted variable that is missing or different, then every variable not wanted."""
    want = {str(key): value for key, value in want.items()}
    found = []
    for key, value in want.items():
        if key not in have or have[key] != _as_text(value):
            found.append(_difference("environment", key, value, have.get(key, "")))
    for key in sorted(set(have) - set(want)):
        found.append(_difference("environment", key, "", have[key]))
    return found


def properties_drift(want, props):
    """Every wanted property that the unit shows otherwise."""
    return [_difference("property", str(name), value, props.get(show_name(name), ""))
            for name, value in want.items() if not same_property(name, value, props.get(show_name(name), ""))]


def drift(props, command=None, environment=None, properties=None, have_environment=None):
    """How a unit (``props`` of ``systemctl show``) differs from what is wanted.

    A list of ``{"what", "name", "want", "have"}``: ``what`` is ``state``,
    ``command`` (``name`` ``argv[N]`` for the first differing argument,
    ``argc`` for a different count), ``environment`` (``want`` is empty for a
    variable that is not wanted; ``have`` is empty for one that is missing)
    or ``property``. A unit that is not running gives a single ``state``
    difference, as nothing runs to compare with.
    ``command``, ``environment`` and ``properties`` that are None are not
    compared. ``props`` must hold ExecStart, Environment and the properties.
    ``have_environment`` replaces the Environment property's (for values the
    main process got elsewhere, such as an EnvironmentFile).
    """
    if not is_running(props):
        state = props.get("ActiveState") or "unknown"
        load = props.get("LoadState")
        have = load if load in ("not-found", "error", "bad-setting", "masked") else state
        return [_difference("state", "ActiveState", "active", have)]
    found = []
    if command is not None:
        command = [_as_text(arg) for arg in command]
        found.extend(command_drift(command, parse_exec_argv(props.get("ExecStart"), like=command)))
    if environment is not None:
        have = parse_environment(props.get("Environment")) if have_environment is None else have_environment
        found.extend(environment_drift(environment, have))
    if properties is not None:
        found.extend(properties_drift(properties, props))
    return found


def _quote(value):
    return '"%s"' % value


def _argument_text(name, want, have, counts):
    """The sentence part for argument ``argv[N]``; ``counts`` is (wanted, found) or None."""
    index = int(name[len("argv["):-1])
    if counts and index >= counts[1]:
        return "command argument %s is missing, the inventory wants %s" % (name, _quote(want))
    if counts and index >= counts[0]:
        return "command argument %s is %s, the inventory wants none" % (name, _quote(have))
    return "command argument %s is %s, the inventory wants %s" % (name, _quote(have), _quote(want))


def _environment_text(name, want, have, environment, expected):
    if expected is not None and name not in expected or expected is None and want == "":
        return "environment %s is %s, the inventory does not set it" % (name, _quote(have))
    if environment is not None and name not in environment:
        return "environment %s is not set, the inventory wants %s" % (name, _quote(want))
    return "environment %s is %s, the inventory wants %s" % (name, _quote(have), _quote(want))


def describe(unit, differences, host=None, fix_hint=None, environment=None, expected_environment=None):
    """One sentence per difference (of drift()), for a report's problems.

    ``laguna-ray-worker.service on laguna-worker: environment NCCL_IB_GID_INDEX
    is "3", the inventory wants "7": rerun --tags ray_cluster,vllm_serve.``
    ``environment`` (the unit's) and ``expected_environment`` (the wanted
    one), when given, tell a variable that is missing or not wanted from an
    empty one.
    """
    where = "%s on %s" % (unit, host) if host else unit
    fix = ": rerun %s." % fix_hint if fix_hint else "."
    counts = next(((to_int(d["want"]), to_int(d["have"])) for d in differences
                   if d["what"] == "command" and d["name"] == "argc"), None)
    sentences = []
    for diff in differences:
        what, name, want, have = diff["what"], diff["name"], diff["want"], diff["have"]
        if what == "state":
            text = "is %s, the inventory wants it %s" % (have, want)
        elif what == "command" and name == "argc":
            text = "the command has %s arguments, the inventory wants %s" % (have, want)
        elif what == "command":
            text = _argument_text(name, want, have, counts)
        elif what == "environment":
            text = _environment_text(name, want, have, environment, expected_environment)
        else:
            shown = _quote(have)
            if is_size_property(name) and human_size(have) != have:
                shown += " (%s)" % human_size(have)
            text = "property %s is %s, the inventory wants %s" % (name, shown, _quote(want))
        sentences.append("%s: %s%s" % (where, text, fix))
    return sentences


def to_int(value, default=0):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def is_running(props):
    """Active, or on its way there; a unit that crashed and waits to be
    restarted (Restart=, SubState auto-restart) does not count."""
    return props.get("ActiveState") in RUNNING_STATES and props.get("SubState") != "auto-restart"


def is_restarting(props):
    """Exited, and to be started again by systemd itself after RestartSec
    (Restart=, SubState auto-restart)."""
    return props.get("ActiveState") in RUNNING_STATES and props.get("SubState") == "auto-restart"


def summarize(unit, props, manager=True):
    """The report of a unit: the documented return values of systemd_user_unit."""
    return {
        "unit": unit,
        "user_manager": manager,
        "exists": props.get("LoadState", "not-found") not in ("not-found", ""),
        "load_state": props.get("LoadState", "not-found" if manager else "unknown"),
        "active_state": props.get("ActiveState", "inactive" if manager else "unknown"),
        "sub_state": props.get("SubState", "dead" if manager else "unknown"),
        "result": props.get("Result", "success" if manager else "unknown"),
        "main_pid": to_int(props.get("MainPID")),
        "exec_main_status": to_int(props.get("ExecMainStatus")),
        "running": is_running(props),
        "restarting": is_restarting(props),
        "description": props.get("Description", ""),
        "environment": parse_environment(props.get("Environment")),
        "properties": dict(props),
    }


def predict(props, action):
    """Properties after ``action`` (started/restarted/stopped), for check and diff mode."""
    after = dict(props)
    if action in ("started", "restarted"):
        after.update(ActiveState="active", SubState="running", Result="success")
    elif action == "stopped":
        after.update(ActiveState="inactive", SubState="dead", MainPID="0")
    return after


def decide(props, state):
    """The action that reaches ``state`` from ``props``: none, started, restarted or stopped."""
    running = is_running(props)
    if state == "started":
        return "none" if running else "started"
    if state == "restarted":
        return "restarted" if running else "started"
    if state == "stopped":
        return "stopped" if running or props.get("ActiveState") == "failed" else "none"
    return "none"


class UserUnits(object):
    """`systemctl --user` through an AnsibleModule."""

    def __init__(self, module, runtime_dir=None):
        self.module = module
        self.env = user_env(runtime_dir)
        self.systemctl = module.get_bin_path("systemctl", required=True)

    def ctl(self, *args):
        # Verbatim: run_command would otherwise expand $VAR and ~ in the arguments.
        return self.module.run_command([self.systemctl, "--user"] + list(args), environ_update=self.env,
                                       expand_user_and_vars=False)

    def show(self, unit, properties=DEFAULT_PROPERTIES):
        """(props, error): error is the message when the user manager cannot be asked."""
        rc, out, err = self.ctl("show", unit, "--property=" + ",".join(properties))
        if rc != 0:
            return {}, (err or out).strip() or "rc=%d" % rc
        return parse_show(out), None

    def show_or_fail(self, unit, properties=DEFAULT_PROPERTIES):
        props, error = self.show(unit, properties)
        if error is None:
            return props
        if self.module.check_mode:
            # Before lingering is on there is no user manager to ask; a real
            # run would start the unit.
            self.module.warn("no user manager to ask about %s (%s); assuming it is not running" % (unit, error))
            return {"LoadState": "not-found", "ActiveState": "inactive"}
        self.module.fail_json(
            msg="systemctl --user show %s failed: %s. Is the user manager running "
                "(loginctl enable-linger; XDG_RUNTIME_DIR=%s)?" % (unit, error, self.env["XDG_RUNTIME_DIR"]))
        return None  # not reached

    def act(self, unit, action):
        """Run ``action`` (started/restarted/stopped) on ``unit``; fails the module on error."""
        verb = {"started": "start", "restarted": "restart", "stopped": "stop"}[action]
        rc, out, err = self.ctl(verb, unit)
        if rc != 0:
            self.module.fail_json(msg="systemctl --user %s %s failed: %s" % (verb, unit, (err or out).strip()))
        if action == "stopped":
            # A transient unit that failed stays loaded until its failure is cleared.
            self.ctl("reset-failed", unit)

    def logs(self, unit, lines=40):
        rc, out, dummy = self.module.run_command(
            ["journalctl", "--user", "--unit", unit, "--no-pager", "-n", str(lines)], environ_update=self.env,
            expand_user_and_vars=False)
        text = (out or "").strip().splitlines()
        if rc != 0 or len(text) <= 1:
            rc, out, dummy = self.ctl("status", "--no-pager", "-n", str(lines), unit)
            text = (out or "").strip().splitlines()
        return text
