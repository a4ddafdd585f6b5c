import ast
import importlib.util
import os
import shutil

import pytest

from ansible_collections.laguna.spark.plugins.module_utils import dflash_patch
from ansible_collections.laguna.spark.plugins.modules import laguna_dflash_patch

from helpers import STANDIN_DFLASH
from helpers.standin import STANDIN_IF, drifted_loader, guarded_loader, loader_with


def load(path):
    spec = importlib.util.spec_from_file_location("laguna_dflash_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class NoCacheScale:
    """A W4A16-style quant config: no get_cache_scale."""


WEIGHTS = [("layers.0.self_attn.qkv_proj.weight", b"w"), ("layers.0.self_attn.attn.k_scale", b"s")]


@pytest.fixture
def venv(tmp_path):
    models = tmp_path / "venv" / "lib" / "python3.12" / "site-packages" / "vllm" / "model_executor" / "models"
    models.mkdir(parents=True)
    shutil.copy(STANDIN_DFLASH, models / "laguna_dflash.py")
    return tmp_path / "venv", models / "laguna_dflash.py"


def test_unguarded_code_fails_with_w4a16_config_then_loads_once_patched(venv, run_module):
    root, target = venv
    with pytest.raises(AttributeError, match="get_cache_scale"):
        load(str(target)).DFlashLagunaModel(NoCacheScale()).load_weights(WEIGHTS)

    result = run_module(laguna_dflash_patch, {"venv": str(root)})

    assert result["changed"] and result["patch_state"] == "patched"
    assert result["path"] == str(target)
    loaded = load(str(target)).DFlashLagunaModel(NoCacheScale()).load_weights(WEIGHTS)
    assert "layers.0.self_attn.qkv_proj.weight" in loaded


def test_patch_changes_exactly_one_line():
    before = open(STANDIN_DFLASH).read()
    after, state = dflash_patch.patch_source(before)
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]
    assert state == "patched"
    assert len(before.splitlines()) == len(after.splitlines())
    assert changed == [(
        '            if self.quant_config is not None and (',
        '            if self.quant_config is not None and hasattr(self.quant_config, "get_cache_scale") and (',
    )]


def test_second_run_is_unchanged_and_backup_kept(venv, run_module):
    root, target = venv
    first = run_module(laguna_dflash_patch, {"venv": str(root)})
    second = run_module(laguna_dflash_patch, {"venv": str(root)})
    assert first["changed"] and os.path.exists(first["backup_file"])
    assert open(first["backup_file"]).read() == open(STANDIN_DFLASH).read()
    assert not second["changed"] and second["patch_state"] == "already_patched"


def test_check_mode_reports_diff_and_writes_nothing(venv, run_module):
    root, target = venv
    result = run_module(laguna_dflash_patch, {"path": str(target)}, check_mode=True, diff=True)
    assert result["changed"]
    assert 'hasattr(self.quant_config, "get_cache_scale")' in result["diff"]["after"]
    assert result["diff"]["before"] == open(STANDIN_DFLASH).read()
    assert open(target).read() == open(STANDIN_DFLASH).read()
    assert "backup_file" not in result


def test_no_backup_when_disabled(venv, run_module):
    root, target = venv
    result = run_module(laguna_dflash_patch, {"path": str(target), "backup": False})
    assert result["changed"] and "backup_file" not in result
    assert os.listdir(target.parent) == ["laguna_dflash.py"]


def test_already_guarded_upstream_is_left_alone(tmp_path, run_module):
    target = tmp_path / "laguna_dflash.py"
    target.write_text(guarded_loader())
    result = run_module(laguna_dflash_patch, {"path": str(target)})
    assert not result["changed"] and result["patch_state"] == "already_patched"


def test_drifted_code_fails_clearly_and_changes_nothing(tmp_path, run_module):
    target = tmp_path / "laguna_dflash.py"
    target.write_text(drifted_loader())
    result = run_module(laguna_dflash_patch, {"path": str(target)})
    assert result.failed
    assert "version drift" in result["msg"] and "DFlashLagunaModel.load_weights" in result["msg"]
    assert open(target).read() == drifted_loader()


def test_missing_file_and_missing_venv_fail_clearly(tmp_path, run_module):
    result = run_module(laguna_dflash_patch, {"path": str(tmp_path / "nope.py")})
    assert result.failed and "does not exist" in result["msg"]
    result = run_module(laguna_dflash_patch, {"venv": str(tmp_path)})
    assert result.failed and "laguna_dflash.py" in result["msg"] and "venv" in result["msg"]


def test_guard_outside_the_method_does_not_count():
    source = open(STANDIN_DFLASH).read() + (
        '\n\ndef elsewhere(self):\n    return hasattr(self.quant_config, "get_cache_scale")\n')
    state = dflash_patch.patch_source(source)[1]
    assert state == "patched"


def test_missing_class_or_method_is_reported():
    source = open(STANDIN_DFLASH).read()
    with pytest.raises(dflash_patch.PatchError, match="no class Nope"):
        dflash_patch.patch_source(source, class_name="Nope")
    with pytest.raises(dflash_patch.PatchError, match="has no method nope"):
        dflash_patch.patch_source(source, method_name="nope")


def test_single_line_condition_is_patched_too():
    source = (
        "class DFlashLagunaModel:\n"
        "    def load_weights(self, weights):\n"
        "        for name, w in weights:\n"
        "            if self.quant_config is not None and (scale_name := self.quant_config.get_cache_scale(name)):\n"
        "                pass\n"
    )
    after, state = dflash_patch.patch_source(source)
    assert state == "patched"
    assert 'is not None and hasattr(self.quant_config, "get_cache_scale") and (scale_name :=' in after
    assert dflash_patch.patch_source(after) == (after, "already_patched")


# "Already patched" is decided on the parsed code: the guard must be in the
# condition that guards the get_cache_scale call, evaluated before it.

PATCHED_IF = '            if self.quant_config is not None and hasattr(self.quant_config, "get_cache_scale") and (\n'


def own_nodes(function):
    """The nodes of a function's own code (not of functions defined in it)."""
    todo = list(ast.iter_child_nodes(function))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))


def guarding_condition(source, class_name="DFlashLagunaModel", method_name="load_weights"):
    """The `if` test around the method's get_cache_scale call, checked here with ast on its own."""
    tree = ast.parse(source)
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == class_name)
    method = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == method_name)
    ifs = [n for n in own_nodes(method) if isinstance(n, ast.If) and any(
        isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "get_cache_scale"
        for c in ast.walk(n.test))]
    assert len(ifs) == 1, ast.dump(method)
    return ifs[0].test


def guard_precedes_call(test):
    """The test is `... and hasattr(self.quant_config, "get_cache_scale") and ... (get_cache_scale(...))`."""
    guard = ast.dump(ast.parse('hasattr(self.quant_config, "get_cache_scale")', mode="eval").body)
    assert isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And), ast.dump(test)
    dumps = [ast.dump(v) for v in test.values]
    call_at = next(i for i, v in enumerate(test.values) if any(
        isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "get_cache_scale"
        for c in ast.walk(v)))
    return guard in dumps[:call_at]


def assert_patched_in_the_condition(source):
    after, state = dflash_patch.patch_source(source)
    assert state == "patched"
    assert not guard_precedes_call(guarding_condition(source))
    assert guard_precedes_call(guarding_condition(after))
    compile(after, "laguna_dflash.py", "exec")
    assert dflash_patch.patch_source(after) == (after, "already_patched")
    return after


def test_guard_quoted_in_a_comment_is_not_patched():
    for comment in (
            # a comment line in the method, and one on the condition's own line
            ('        for name, loaded_weight in weights:\n',
             '        # needs hasattr(self.quant_config, "get_cache_scale") for W4A16\n'
             '        for name, loaded_weight in weights:\n'),
            (STANDIN_IF, STANDIN_IF.rstrip("\n") + '  # hasattr(self.quant_config, "get_cache_scale")\n')):
        after = assert_patched_in_the_condition(loader_with(*comment))
        assert after.count('hasattr(self.quant_config, "get_cache_scale")') == 2  # the comment is kept


def test_guard_quoted_in_a_docstring_or_string_is_not_patched():
    signature = '    def load_weights(self, weights: Iterable[tuple[str, object]]) -> set[str]:\n'
    docstring = signature + '        """Guarded by hasattr(self.quant_config, "get_cache_scale")."""\n'
    assignment = signature + "        note = 'hasattr(self.quant_config, \"get_cache_scale\")'\n"
    fstring = signature + "        note = f'{hasattr}(self.quant_config, \"get_cache_scale\")'\n"
    for new in (docstring, assignment, fstring):
        assert_patched_in_the_condition(loader_with(signature, new))


def test_module_patches_a_file_whose_only_guard_is_quoted(tmp_path, run_module):
    target = tmp_path / "laguna_dflash.py"
    target.write_text(loader_with(STANDIN_IF, STANDIN_IF.rstrip("\n") + '  # hasattr(self.quant_config, "get_cache_scale")\n'))
    checked = run_module(laguna_dflash_patch, {"path": str(target)}, check_mode=True)
    assert checked["changed"] and checked["patch_state"] == "patched"
    result = run_module(laguna_dflash_patch, {"path": str(target)})
    assert result["changed"] and result["patch_state"] == "patched"
    assert guard_precedes_call(guarding_condition(target.read_text()))
    loaded = load(str(target)).DFlashLagunaModel(NoCacheScale()).load_weights(WEIGHTS)
    assert "layers.0.self_attn.qkv_proj.weight" in loaded


def test_guard_in_another_function_is_not_patched():
    guarded = ('    def other(self, name):\n'
               '        if self.quant_config is not None and hasattr(self.quant_config, "get_cache_scale") and (\n'
               '            scale_name := self.quant_config.get_cache_scale(name)\n'
               '        ):\n'
               '            return scale_name\n\n')
    # another method of the same class, another class's load_weights, and a function nested in the method
    method = loader_with('    def named_parameters(self):\n', guarded + '    def named_parameters(self):\n')
    other_class = open(STANDIN_DFLASH).read() + "\n\nclass Other:\n" + guarded.replace("def other", "def load_weights")
    signature = '    def load_weights(self, weights: Iterable[tuple[str, object]]) -> set[str]:\n'
    nested = loader_with(signature, signature + "".join("    " + line if line.strip() else line
                                                        for line in guarded.splitlines(True)))
    for source in (method, other_class, nested):
        assert_patched_in_the_condition(source)


def test_guard_after_the_call_or_under_or_does_not_count():
    call = '                scale_name := self.quant_config.get_cache_scale(name)\n            ):\n'
    after_call = loader_with(call, '                scale_name := self.quant_config.get_cache_scale(name)\n'
                                   '            ) and hasattr(self.quant_config, "get_cache_scale"):\n')
    under_or = loader_with(STANDIN_IF, '            if self.quant_config is not None and (hasattr(self.quant_config, '
                                       '"get_cache_scale") or name) and (\n')
    for source in (after_call, under_or):
        after, state = dflash_patch.patch_source(source)
        assert state == "patched"
        assert dflash_patch.patch_source(after) == (after, "already_patched")
    assert PATCHED_IF.replace(" and (\n", "") in dflash_patch.patch_source(after_call)[0]


def test_guard_in_the_real_condition_is_already_patched(tmp_path, run_module):
    recipe = loader_with(STANDIN_IF, '            if self.quant_config is not None and hasattr(\n'
                                     '                self.quant_config, "get_cache_scale"\n'
                                     '            ) and (\n')
    patched = loader_with(STANDIN_IF, PATCHED_IF)
    single_quotes = loader_with(STANDIN_IF, PATCHED_IF.replace('"get_cache_scale"', "'get_cache_scale'"))
    nested_if = loader_with(STANDIN_IF, '            if hasattr(self.quant_config, "get_cache_scale") and (\n'
                                        '                self.quant_config is not None) and (\n')
    for source in (recipe, patched, single_quotes, nested_if):
        assert dflash_patch.patch_source(source) == (source, "already_patched")
        target = tmp_path / "laguna_dflash.py"
        target.write_text(source)
        result = run_module(laguna_dflash_patch, {"path": str(target)}, diff=True)
        assert not result["changed"] and result["patch_state"] == "already_patched"
        assert "backup_file" not in result and "diff" not in result
        assert target.read_text() == source and os.listdir(tmp_path) == ["laguna_dflash.py"]


def test_call_under_an_if_that_tests_the_guard_is_already_patched():
    source = (
        "class DFlashLagunaModel:\n"
        "    def load_weights(self, weights):\n"
        "        for name, w in weights:\n"
        "            if hasattr(self.quant_config, 'get_cache_scale'):\n"
        "                scale_name = self.quant_config.get_cache_scale(name)\n"
    )
    assert dflash_patch.patch_source(source) == (source, "already_patched")
    unguarded = source.replace("if hasattr(", "if not hasattr(")
    with pytest.raises(dflash_patch.PatchError, match="version drift"):
        dflash_patch.patch_source(unguarded)


def test_offsets_survive_non_ascii_text_and_form_feeds():
    """ast counts columns in UTF-8 bytes and lines at newlines only; the edit lands in the condition."""
    source = loader_with(STANDIN_IF, '            if self.quant_config is not None and name != "é—ü" and (\n')
    source = source.replace("class DFlashLagunaModel:", "\f\n# \u2028 ¶\nclass DFlashLagunaModel:")
    after = assert_patched_in_the_condition(source)
    assert '!= "é—ü" and hasattr(self.quant_config, "get_cache_scale") and (\n' in after
