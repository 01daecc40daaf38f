"""`read_section`: a section of fixed keys read from its table of `Field`s in one call, with
the errors a hand-written parser would give, in the same order."""

import pytest

from tune_lowmem.validation import ConfigError, Field, positive_int, read_section, section

FIELDS = {
    "name": Field(required="required"),
    "count": Field(positive_int, 1),
    "notes": Field(default={}, blank_is_default=True),
    "inner": Field(section({"size": Field(positive_int, 2)}, optional=True)),
}


def test_defaults_fill_what_is_absent_and_blank_reads_as_absent():
    assert read_section({"name": "a", "notes": None}, FIELDS, "") == {
        "name": "a",
        "count": 1,
        "notes": {},
        "inner": None,
    }
    inner = read_section({"name": "a", "inner": {}}, FIELDS, "")["inner"]
    assert inner == {"size": 2}


@pytest.mark.parametrize(
    "values, message",
    [
        ({"name": "a", "colour": 1, "count": 0}, "colour: unknown key; allowed: name, count"),
        ({"count": 0}, "name: required"),
        ({"name": "a", "count": 0}, "count: 0 is not allowed; a positive integer is required"),
        ({"name": "a", "inner": 3}, "inner: 3 is not allowed; a mapping is required"),
        ({"name": "a", "inner": {"size": 0}}, "inner.size: 0 is not allowed; a positive"),
        ({"name": "a", "inner": {"depth": 1}}, "inner.depth: unknown key; allowed: size"),
    ],
)
def test_errors_name_the_field_unknown_keys_first_then_missing_then_values(values, message):
    with pytest.raises(ConfigError, match=f"^{message}"):
        read_section(values, FIELDS, "")
