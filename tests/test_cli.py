"""Command lines generated from configuration dataclasses: options, defaults, choices, usage errors, round trips."""

import argparse
import json
import math
from dataclasses import dataclass

import pytest

from systems import train
from systems.cli import HelpFormatter, add_arguments, dump_json, option, parse, to_argv


@dataclass
class Probe:
    size: str = option("model size", default="small", choices=("small", "large"))
    steps: int = option("timed steps", default=10, sweep=True)
    lr: float | None = option("learning rate", default=None)
    progress: bool = option("show progress", default=True)
    compile: bool = option("compile the model", default=False)

    def __post_init__(self):
        if isinstance(self.steps, int) and self.steps < 1:
            raise ValueError(f"steps must be positive, got {self.steps}")


def parser(**kw) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="probe", formatter_class=HelpFormatter)
    add_arguments(p, Probe, **kw)
    return p


def test_options_round_trip_through_the_command_line():
    cfg = Probe(size="large", steps=3, lr=0.5, progress=False, compile=True)
    assert parse(parser(), Probe, to_argv(cfg)) == cfg
    assert to_argv(Probe()) == []  # defaults are not repeated


def test_bad_values_are_usage_errors_not_tracebacks(capsys):
    for argv in (["--size", "huge"], ["--steps", "x"], ["--steps", "0"]):
        with pytest.raises(SystemExit) as exit_:
            parse(parser(), Probe, argv)
        assert exit_.value.code == 2
    assert "steps must be positive" in capsys.readouterr().err


def test_help_shows_defaults_and_choices():
    text = parser().format_help()
    assert "{small,large}" in text and "(default: small)" in text and "(default: 10)" in text
    assert "--no-progress" in text and "--compile" in text


def test_sweep_fields_take_several_values():
    args = parser(sweep=True).parse_args(["--steps", "1", "2"])
    assert args.steps == [1, 2] and parser(sweep=True).parse_args([]).steps == [10]


def test_json_is_strict():
    text = dump_json({"loss": math.nan, "norm": [1.0, math.inf], "ok": 2})
    assert json.loads(text) == {"loss": None, "norm": [1.0, None], "ok": 2}
    assert "NaN" not in text and "Infinity" not in text


def test_the_training_cli_says_what_its_switches_do():
    text = train._parser().format_help()
    assert "--no-progress         do not show a progress bar on rank 0" in " ".join(text.split("\n"))
    assert "(default: 128)" in text and "{none,torch,naive,flat,overlap,bucketed,fsdp,fsdp2}" in text
