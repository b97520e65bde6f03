"""Every pytest-devmem setting, given on the command line, as an ini key or as an environment
variable, with hostile values: the run stops with a usage error or runs, never an INTERNALERROR or
a traceback from inside the plugin. The command line runs in the fast selection with every value;
the ini file and the environment (`slow`) reach the same parsers through their own reader
(`raw_value`), so there the values are those a reader could trip on: empty, not ASCII, long."""

from __future__ import annotations

import pytest

from pytest_devmem.options import OPTIONS

BAD_VALUES = ["", "-1", "0", "nan", "inf", "1e309", "ünïcødé☃", "x" * 5000]
READER_VALUES = ["", "ünïcødé☃", "x" * 5000]
"""What an ini file's or the environment's reader could trip on; the numbers are the parsers', which
every source shares (raw_value hands each the same text), swept from the command line."""


def value_settings() -> list[str]:
    return [option.name for option in OPTIONS]


@pytest.mark.parametrize(
    "where", ["cli", pytest.param("ini", marks=pytest.mark.slow), pytest.param("env", marks=pytest.mark.slow)]
)
@pytest.mark.parametrize("name", value_settings())
def test_hostile_values_never_crash_the_plugin(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, name: str, where: str
) -> None:
    option = next(o for o in OPTIONS if o.name == name)
    pytester.makepyfile("def test_one(devmem):\n    devmem.pool.alloc(1024)\n")
    # a flag on the command line takes no value: one run says all there is to say
    values = (BAD_VALUES[:1] if option.flag else BAD_VALUES) if where == "cli" else READER_VALUES
    for value in values:
        args = ["-p", "no:cacheprovider"]
        monkeypatch.delenv(option.env, raising=False)
        (pytester.path / "tox.ini").unlink(missing_ok=True)
        if where == "cli":
            args.append(f"{option.option}={value}" if not option.flag else option.option)
        elif where == "ini":
            pytester.makeini(f"[pytest]\n{option.ini} = {value}\n")
        else:
            monkeypatch.setenv(option.env, value)
        result = pytester.runpytest_inprocess(*args)
        output = result.stdout.str() + result.stderr.str()
        allowed = (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.USAGE_ERROR) + (
            (pytest.ExitCode.NO_TESTS_COLLECTED,) if name == "only" else ()
        )  # --devmem-only deselects the unmarked test
        assert result.ret in allowed, (value[:40], output[-2000:])
        assert "INTERNALERROR" not in output and "Traceback" not in output, (value[:40], output[-2000:])
        if result.ret == pytest.ExitCode.USAGE_ERROR:
            assert "(from " in output, (value[:40], output[-2000:])  # the error says where the value came from
