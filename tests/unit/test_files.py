"""plugins/module_utils/files.py on real files under tmp_path, with a real AnsibleModule's atomic_move."""
import os

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.laguna.spark.plugins.module_utils import files


@pytest.fixture
def module():
    with patch_module_args({"_ansible_remote_tmp": "/tmp", "_ansible_keep_remote_files": False}):
        return AnsibleModule(argument_spec={})


def listing(directory):
    return sorted(os.listdir(str(directory)))


def test_a_missing_file_reads_as_the_default(tmp_path):
    missing = str(tmp_path / "missing")
    assert files.read_text(missing) is None and files.read_bytes(missing) is None
    assert files.read_text(missing, default="") == "" and files.read_bytes(missing, default=b"x") == b"x"
    assert files.read_json(missing, default={}) == {} and files.read_sysfs(missing) is None
    assert files.file_mode(missing) is None
    # a directory cannot be read either
    assert files.read_text(str(tmp_path)) is None and files.read_bytes(str(tmp_path)) is None


def test_reads_give_the_content(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"  one\r\ntwo \xff\n")
    assert files.read_bytes(str(path)) == b"  one\r\ntwo \xff\n"
    assert files.read_text(str(path), encoding="utf-8", errors="surrogateescape", newline="") == "  one\r\ntwo \udcff\n"
    assert files.read_text(str(path), encoding="latin-1", strip=True) == "one\ntwo \xff"
    assert files.read_sysfs(str(path)) == "one\ntwo \ufffd"
    with pytest.raises(UnicodeDecodeError):
        files.read_text(str(path), encoding="utf-8")
    assert files.read_text(str(path), encoding="utf-8", default="d", undecodable=files.DEFAULT) == "d"


def test_read_json_gives_the_default_for_what_is_not_json(tmp_path):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text('{"a": [1, null]}')
    bad.write_text('{"a": ')
    assert files.read_json(str(good)) == {"a": [1, None]}
    assert files.read_json(str(bad)) is None and files.read_json(str(bad), default={}) == {}


def test_file_mode_is_masked(tmp_path):
    path = tmp_path / "f"
    path.write_text("x")
    os.chmod(str(path), 0o4751)
    assert files.file_mode(str(path)) == 0o4751 and files.file_mode(str(path), 0o777) == 0o751


def test_nearest_is_the_path_or_the_closest_parent_that_passes_the_test(tmp_path):
    deep = str(tmp_path / "not" / "yet" / "there")
    assert files.nearest(deep, os.path.exists) == str(tmp_path)
    assert files.nearest(str(tmp_path), os.path.isdir) == str(tmp_path)
    mount = files.nearest(deep, os.path.ismount)
    assert os.path.ismount(mount) and (str(tmp_path) + "/").startswith(mount.rstrip("/") + "/")
    assert files.nearest(deep, lambda path: False) == "/"  # the root when nothing passes
    assert files.nearest("/", os.path.ismount) == "/"


def test_list_dir_is_sorted_and_empty_for_what_cannot_be_listed(tmp_path):
    for name in ("b", "a", "c"):
        (tmp_path / name).write_text("")
    assert files.list_dir(str(tmp_path)) == ["a", "b", "c"]
    assert files.list_dir(str(tmp_path / "missing")) == [] and files.list_dir(str(tmp_path / "a")) == []


def test_make_dir_creates_missing_parents_and_leaves_an_existing_directory(tmp_path):
    target = tmp_path / "a" / "b"
    old = os.umask(0o077)
    try:
        assert files.make_dir(str(target), 0o755)
        assert os.stat(str(target)).st_mode & 0o777 == 0o700  # the umask applies
        os.rmdir(str(target))
        assert files.make_dir(str(target), 0o755, exact=True)
        assert os.stat(str(target)).st_mode & 0o777 == 0o755
    finally:
        os.umask(old)
    os.chmod(str(target), 0o711)
    assert not files.make_dir(str(target), 0o700, exact=True)
    assert os.stat(str(target)).st_mode & 0o777 == 0o711


def test_an_atomic_write_keeps_an_existing_files_mode(module, tmp_path):
    path = tmp_path / "f"
    path.write_text("old")
    os.chmod(str(path), 0o640)
    files.write_atomic(module, str(path), "new text\n")
    assert path.read_text() == "new text\n" and os.stat(str(path)).st_mode & 0o7777 == 0o640
    files.write_atomic(module, str(path), b"new bytes")
    assert path.read_bytes() == b"new bytes" and os.stat(str(path)).st_mode & 0o7777 == 0o640
    assert listing(tmp_path) == ["f"]


def test_an_atomic_write_of_a_new_file_gets_the_umasks_mode_or_the_one_given(module, tmp_path):
    old = os.umask(0o027)
    try:
        files.write_atomic(module, str(tmp_path / "plain"), "x")
    finally:
        os.umask(old)
    assert os.stat(str(tmp_path / "plain")).st_mode & 0o7777 == 0o640
    files.write_atomic(module, str(tmp_path / "exact"), "x", mode=0o600)
    assert os.stat(str(tmp_path / "exact")).st_mode & 0o7777 == 0o600
    os.chmod(str(tmp_path / "exact"), 0o644)
    files.write_atomic(module, str(tmp_path / "exact"), "y", mode=0o600)
    assert os.stat(str(tmp_path / "exact")).st_mode & 0o7777 == 0o600


def test_an_atomic_write_creates_the_directory_only_when_asked(module, tmp_path):
    path = tmp_path / "d" / "e" / "f"
    with pytest.raises(OSError):
        files.write_atomic(module, str(path), "x")
    files.write_atomic(module, str(path), "x", dir_mode=0o700)
    assert path.read_text() == "x" and os.stat(str(path.parent)).st_mode & 0o777 == 0o700


def test_a_failed_write_leaves_the_old_content_and_no_temporary_file(module, tmp_path):
    path = tmp_path / "f"
    path.write_text("old")

    def refuse(tmp):
        assert os.path.dirname(tmp) == str(tmp_path) and open(tmp).read() == "new"
        raise SystemExit(1)  # as fail_json ends a module

    with pytest.raises(SystemExit):
        files.write_atomic(module, str(path), "new", mode=0o600, check=refuse)
    assert path.read_text() == "old" and listing(tmp_path) == ["f"]

    def broken_move(src, dest):
        raise OSError("disk full")

    module.atomic_move = broken_move
    with pytest.raises(OSError):
        files.write_atomic(module, str(path), "new")
    assert path.read_text() == "old" and listing(tmp_path) == ["f"]
    with pytest.raises(TypeError):
        files.write_atomic(module, str(path), 42)
    assert path.read_text() == "old" and listing(tmp_path) == ["f"]
