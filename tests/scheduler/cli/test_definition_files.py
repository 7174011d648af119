"""Definition files for `scheduler apply`/`diff`: every accepted form, the one-line errors that
name the file and document, and the bounds (bytes, count, aliases, nesting)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.entrypoints.clikit import definition_files as df
from scheduler.entrypoints.clikit.definition_files import DefinitionFileError, load_definitions


def _d(key: str, **extra: object) -> dict[str, object]:
    return {"key": key, "name": key, "cron": "0 3 * * *", "timezone": "UTC", **extra}


def _error(paths: list[Path], **kw: bool) -> str:
    with pytest.raises(DefinitionFileError) as caught:
        load_definitions(paths, **kw)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_yaml_multi_document_and_schedules_list(tmp_path: Path) -> None:
    f = tmp_path / "a.yaml"
    f.write_text(
        "key: one\nname: one\ncron: '0 3 * * *'\ntimezone: UTC\n"
        "---\n# only a comment: an empty document is skipped\n"
        "---\nschedules:\n  - {key: two, name: two, cron: '@daily', timezone: UTC}\n"
        "  - {key: three, name: three, cron: '@hourly', timezone: UTC, labels: {team: ops}}\n"
    )
    got = load_definitions([f])
    assert [d["key"] for d in got.items] == ["one", "two", "three"]
    assert got.items[2]["labels"] == {"team": "ops"}
    assert [str(o) for o in got.origins] == [
        f"{f}: document 1",
        f"{f}: document 3: schedules[0]",
        f"{f}: document 3: schedules[1]",
    ]


@pytest.mark.parametrize(
    "doc",
    [_d("a"), [_d("a"), _d("b")], {"schedules": [_d("a"), _d("b")]}],
    ids=["one", "list", "schedules"],
)
def test_json_forms(tmp_path: Path, doc: object) -> None:
    f = tmp_path / "s.json"
    f.write_text(json.dumps(doc))
    got = load_definitions([f])
    assert got.items[0] == _d("a")
    assert len(got.items) == (1 if isinstance(doc, dict) and "key" in doc else 2)


def test_a_directory_reads_its_definition_files_sorted_not_its_subdirectories(
    tmp_path: Path,
) -> None:
    (tmp_path / "b.yml").write_text(json.dumps(_d("b")))
    (tmp_path / "a.json").write_text(json.dumps(_d("a")))
    (tmp_path / "c.YAML").write_text("key: c\n")
    (tmp_path / "notes.txt").write_text("key: ignored\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.yaml").write_text("key: d\n")
    assert [d["key"] for d in load_definitions([tmp_path]).items] == ["a", "b", "c"]
    deep = load_definitions([tmp_path], recursive=True)
    assert [d["key"] for d in deep.items] == ["a", "b", "c", "d"]


def test_yaml_timestamps_become_rfc3339_text(tmp_path: Path) -> None:
    f = tmp_path / "t.yaml"
    f.write_text("key: t\nstart_at: 2026-03-08T02:30:00Z\nend_at: 2026-12-31\n")
    item = load_definitions([f]).items[0]
    assert item["start_at"] == "2026-03-08T02:30:00+00:00"
    assert item["end_at"] == "2026-12-31"
    json.dumps(item)  # JSON data throughout


def test_a_bad_document_names_the_file_and_document(tmp_path: Path) -> None:
    f = tmp_path / "schedules.yaml"
    f.write_text("key: a\n---\nkey: b\n---\nname: no-key\ncron: '@daily'\n")
    assert _error([f]) == f"{f}: document 3: 'key' is required"


def test_a_yaml_syntax_error_names_document_and_line(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("key: a\n---\nkey: b\n  cron: x: y\n")
    message = _error([f])
    assert message.startswith(f"{f}: document 2: YAML error at line 4, column "), message


def test_a_json_syntax_error_names_line_and_column(tmp_path: Path) -> None:
    f = tmp_path / "bad.json"
    f.write_text('{"key": "a",\n "cron": }')
    assert _error([f]).startswith(f"{f}: JSON syntax error at line 2, column 10: ")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "schedules:\n  - key: a\n  - 42\n",
            "document 1: schedules[1]: a definition must be a mapping, not a number",
        ),
        ("- key: a\n- key: a\n", "document 1: schedules[1]: key 'a' is also defined at"),
        ("key: 7\n", "document 1: 'key' must be a non-empty string"),
        ("key: a\npayload: {1: x}\n", "document 1: 'payload' has a field name that is not text"),
        ("key: a\npayload: !!binary aGk=\n", "document 1: 'payload' is a bytes"),
        ("key: a\npayload: .nan\n", "document 1: 'payload' is nan"),
        ("schedules: {key: a}\n", "document 1: 'schedules' must be a list"),
        ("key: a\npayload: !!python/object:os.system {}\n", "document 1: YAML error"),
    ],
)
def test_what_a_definition_cannot_be(tmp_path: Path, text: str, expected: str) -> None:
    f = tmp_path / "x.yaml"
    f.write_text(text)
    assert _error([f]).startswith(f"{f}: {expected}")


def test_duplicate_keys_across_files_name_both(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("key: same\n")
    (tmp_path / "b.json").write_text('{"key": "same"}')
    message = _error([tmp_path])
    assert (
        message
        == f"{tmp_path / 'b.json'}: key 'same' is also defined at {tmp_path / 'a.yaml'}: document 1"
    )


def test_missing_path_and_no_definitions(tmp_path: Path) -> None:
    assert (
        _error([tmp_path / "nope.yaml"]) == f"{tmp_path / 'nope.yaml'}: no such file or directory"
    )
    (tmp_path / "empty.yaml").write_text("# nothing\n")
    assert "no schedule definitions found" in _error([tmp_path])


def test_oversize_input_is_refused_before_parsing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(df, "MAX_TOTAL_BYTES", 100)
    (tmp_path / "a.yaml").write_text("key: a\nname: " + "x" * 60 + "\n")
    (tmp_path / "b.yaml").write_text("key: b\nname: " + "x" * 60 + "\n")
    assert load_definitions([tmp_path / "a.yaml"]).items[0]["key"] == "a"  # alone it fits
    message = _error([tmp_path])
    assert message == f"{tmp_path / 'b.yaml'}: the files read exceed 100 bytes in total"


def test_the_default_size_bound_is_16_mib(tmp_path: Path) -> None:
    f = tmp_path / "big.json"
    f.write_text(json.dumps({"key": "a", "payload": "x" * (16 * 1024 * 1024)}))
    assert _error([f]) == f"{f}: the files read exceed 16 MiB in total"


def test_more_than_10000_definitions_are_refused(tmp_path: Path) -> None:
    f = tmp_path / "many.json"
    f.write_text(json.dumps([{"key": f"k{i}"} for i in range(10_001)]))
    assert _error([f]) == f"{f}: schedules[10000]: more than 10000 definitions"
    f.write_text(json.dumps([{"key": f"k{i}"} for i in range(10_000)]))
    assert len(load_definitions([f]).items) == 10_000


def test_a_yaml_alias_bomb_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(df, "MAX_VALUES", 10_000)
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    f = tmp_path / "bomb.yaml"
    f.write_text("key: bomb\npayload:\n" + "\n".join(f"  {line}" for line in lines) + "\n")
    assert "more than 10000 values" in _error([f])


def test_deep_nesting_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "deep.json"
    f.write_text('{"key": "a", "payload": ' + "[" * 100 + "]" * 100 + "}")
    assert "nested deeper than 64" in _error([f])
    f.write_text('{"key": "a", "payload": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert "nested too deeply" in _error([f])
