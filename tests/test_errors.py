"""errors.py: the one-line forms of foreign errors."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from agentsched.errors import one_line, validation_line


class _Card(BaseModel):
    cpu_ms: float
    tags: list[str]


def _errors(data: dict) -> list:
    with pytest.raises(ValidationError) as e:
        _Card.model_validate(data)
    return e.value.errors()


def test_the_first_validation_error_names_where_and_what_and_how_many_more():
    assert validation_line(_errors({"cpu_ms": "x", "tags": "y"})) == (
        "cpu_ms: Input should be a valid number, unable to parse string as a number (+1 more)"
    )
    assert validation_line(_errors({"cpu_ms": 1.0, "tags": [1]})) == "tags.0: Input should be a valid string"
    assert validation_line(_errors({"cpu_ms": "x", "tags": "y"}), more=False).endswith("as a number")


def test_an_error_without_a_place_takes_the_default_and_pydantics_prefix_goes():
    assert validation_line([{"loc": (), "msg": "Value error, cycle A -> B -> A"}], "workflow") == (
        "workflow: cycle A -> B -> A"
    )
    assert validation_line([{"msg": "bad"}]) == "bad"
    assert validation_line([], "world") == "world"


class _Strict(BaseModel, extra="forbid"):
    tasks: dict
    name: str = "w"


def test_a_missing_key_beside_an_unknown_one_names_the_unknown_one():
    with pytest.raises(ValidationError) as e:
        _Strict.model_validate({"taks": {}})
    assert validation_line(e.value.errors(), more=False) == (
        "tasks: Field required (an unknown key 'taks' was given: misspelt?)"
    )
    with pytest.raises(ValidationError) as e:
        _Strict.model_validate({})
    assert validation_line(e.value.errors()) == "tasks: Field required"  # nothing unknown: nothing said


@pytest.mark.parametrize(
    "message, line",
    [
        (
            "connect failed http://user:hunter2@db.example/x api_key=sk-SECRET123",
            "RuntimeError: connect failed http://***@db.example/x api_key=***",
        ),
        (
            'bad settings {"password": "pw-1234", "host": "h"}',
            'RuntimeError: bad settings {"password": ***, "host": "h"}',
        ),
        ("auth Token: abcdef failed", "RuntimeError: auth Token: *** failed"),
        ("\x1b[31mRED\x1b[0m \u202eevil\tend\nsecond line", "RuntimeError: \\x1b[31mRED\\x1b[0m \\u202eevil\\tend"),
        ("max_tokens=5 tokens: 7", "RuntimeError: max_tokens=5 tokens: 7"),  # not secret keys
    ],
)
def test_a_foreign_error_is_quoted_without_its_secrets_or_terminal_control(message, line):
    """A tool's error was printed, stored and served as it was: credentials, ESC sequences and all."""
    assert one_line(RuntimeError(message)) == line
