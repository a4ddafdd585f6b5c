"""Stand-in wheels with the real names and versions, and a PEP 503 index serving them.

The wheels hold a tiny module each and the console scripts the recipe runs
(vllm, ray, hf, ninja), so the venv role's real pip path can run offline.
"""
import base64
import hashlib
import http.server
import os
import threading
import time
import zipfile

STANDINS = [
    # (distribution, version, requires, console scripts)
    ("vllm", "0.25.1", ["torch==2.11.0", "ninja"], ["vllm"]),
    ("torch", "2.11.0+cu130", [], []),
    ("ray", "2.60.0", [], ["ray"]),
    ("huggingface_hub", "2.4.0", [], ["hf"]),  # the venv role's pin
    ("ninja", "1.13.0", [], ["ninja"]),
]


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def make_wheel(dest, dist, version, requires=(), scripts=(), entry=None, package_dir=None):
    """A wheel of a tiny module whose console scripts print the name and
    version, or, with package_dir, of that package tree, the scripts
    running ``entry`` ("module:function")."""
    module = "%s_standin" % dist.replace("-", "_")
    info = "%s-%s.dist-info" % (dist, version)
    files = {
        "%s.py" % module: "def main():\n    print(%r)\n    return 0\n" % ("%s %s (stand-in)" % (dist, version)),
        "%s/METADATA" % info: "Metadata-Version: 2.1\nName: %s\nVersion: %s\n%s" % (
            dist, version, "".join("Requires-Dist: %s\n" % r for r in requires)),
        "%s/WHEEL" % info: "Wheel-Version: 1.0\nGenerator: laguna-standin\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        "%s/entry_points.txt" % info: "[console_scripts]\n" + "".join(
            "%s = %s\n" % (s, entry or module + ":main") for s in scripts),
    }
    if package_dir:
        del files["%s.py" % module]
        top = os.path.basename(package_dir.rstrip("/"))
        for base, dirs, names in os.walk(package_dir):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(names):
                if name.endswith(".pyc"):
                    continue
                with open(os.path.join(base, name)) as fh:
                    files[os.path.join(top, os.path.relpath(os.path.join(base, name), package_dir))] = fh.read()
    path = os.path.join(dest, "%s-%s-py3-none-any.whl" % (dist, version))
    record = []
    with zipfile.ZipFile(path, "w") as whl:
        for name, text in files.items():
            data = text.encode()
            whl.writestr(name, data)
            record.append(_record_line(name, data))
        record.append("%s/RECORD,," % info)
        whl.writestr("%s/RECORD" % info, "\n".join(record) + "\n")
    return path


def build_index(root, standins=None):
    """root/simple/<project>/index.html and the wheels beside them (of STANDINS by default)."""
    if standins is None:
        standins = STANDINS
    for dist, version, requires, scripts in standins:
        project = dist.lower().replace("_", "-")
        pdir = os.path.join(root, "simple", project)
        os.makedirs(pdir, exist_ok=True)
        wheel = os.path.basename(make_wheel(pdir, dist, version, requires, scripts))
        with open(os.path.join(pdir, "index.html"), "w") as fh:
            fh.write('<!DOCTYPE html><html><body><a href="%s">%s</a></body></html>\n' % (wheel, wheel))
    return root


class Index:
    """The index served on 127.0.0.1; ``requests`` counts the GETs."""

    def __init__(self, root):
        self.requests = []
        self.delay = 0  # seconds before each answer: a slow index keeps pip running
        index = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=root, **kwargs)

            def do_GET(self):
                index.requests.append(self.path)
                if index.delay:
                    time.sleep(index.delay)
                return super().do_GET()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d/simple" % self.server.server_address[1]

    def close(self):
        self.server.shutdown()
        self.server.server_close()
