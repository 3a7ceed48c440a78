"""The command line builds only the parser of the command it runs, and imports little."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

from app.cli import main


def _registered(module_name: str) -> set[str]:
    parser = argparse.ArgumentParser()
    subcommands = parser.add_subparsers()
    importlib.import_module(f"app.cli.{module_name}").register(subcommands)
    return set(subcommands.choices)


def test_the_command_table_names_what_each_module_registers():
    for module_name in set(main.COMMAND_MODULES.values()):
        mapped = {c for c, m in main.COMMAND_MODULES.items() if m == module_name}
        assert _registered(module_name) == mapped, module_name


def test_a_known_command_gets_only_its_own_parser_and_help_gets_all():
    only = main.build_parser("doctor")
    assert set(only._subparsers._group_actions[0].choices) == {"doctor"}
    every = main.build_parser(None)
    assert set(every._subparsers._group_actions[0].choices) == set(main.COMMAND_MODULES)
    assert main._command_in(["--smoke-test"]) is None
    assert main._command_in(["doctor", "--json"]) == "doctor"


def test_doctor_imports_neither_the_store_nor_long_document_mode(tmp_path):
    # A fresh interpreter: this test process has imported everything already.
    code = (
        "import sys\n"
        "from app.cli.main import main\n"
        "status = main(['doctor', '--json'])\n"
        "heavy = sorted(m for m in ('sqlite_utils', 'app.core.longdoc', "
        "'app.core.store', 'mlx', 'PySide6') if m in sys.modules)\n"
        "print('HEAVY', heavy, status)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={"SWAPLESS_HOME": str(tmp_path), "SWAPLESS_NO_OPENBLAS": "1", "PATH": ""},
        check=False,
    )
    assert "HEAVY [] 0" in out.stdout, out.stdout + out.stderr


def test_the_tokenizers_too_long_warning_is_silenced_and_others_are_kept():
    import logging

    from transformers import AutoTokenizer

    from app.core.modelkit.reference.install import committed_folder

    main.quiet_tokenizer_length_warning()
    main.quiet_tokenizer_length_warning()  # once is enough, twice adds nothing
    logger = logging.getLogger(main.TOKENIZER_LOGGER)
    assert len(logger.filters) == 1
    seen: list[str] = []
    catcher = logging.Handler(logging.WARNING)
    catcher.emit = lambda record: seen.append(record.getMessage())
    logger.addHandler(catcher)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(committed_folder()))
        ids = tokenizer.encode("word " * (tokenizer.model_max_length + 10))
        logger.warning("another warning")
    finally:
        logger.removeHandler(catcher)
    assert len(ids) > tokenizer.model_max_length
    assert seen == ["another warning"]
