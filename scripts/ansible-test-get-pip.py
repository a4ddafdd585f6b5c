"""Bootstrap pip into an empty virtual environment for ansible-test.

ansible-test creates its sanity-test environments without pip and runs a
cached get-pip script to put pip into them, downloading that script from a
host other than the package index when it is not cached. scripts/lint.sh
caches this file in its place instead: it takes pip from the interpreter's own
ensurepip, then installs the pip version ansible-test asks for (and anything
else it asks for) from the package index.

Called as: python get_pip_X_Y.py [pip options] pip==X.Y ...
"""
import subprocess
import sys

# get-pip's own options; `pip install` does not know them.
OWN_OPTIONS = ("--no-setuptools", "--no-wheel")


def main():
    args = [arg for arg in sys.argv[1:] if arg not in OWN_OPTIONS]
    subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"],
                          stdout=subprocess.DEVNULL)
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet"] + args)


if __name__ == "__main__":
    main()
